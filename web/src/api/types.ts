// The shapes of the monitor's GraphQL results that the dashboard selects (see
// services/monitor/schema.graphql). Optional fields are the ones the schema allows to be null.
// What comes from computeall.protocol (statuses, step metrics) is generated into ./protocol.ts.
import type { SessionStatus } from "./protocol";

export type { SessionStatus, Step, StepSeries } from "./protocol";

export interface SessionSummary {
  id: string;
  status: SessionStatus;
  /** steps completed (the session fold's next_step), as `computeall session list` counts them */
  step: number;
  /** the steps it was created to run */
  plannedSteps: number | null;
  /** a verification run (`computeall replay verify`): the session whose steps it runs again */
  verifies: string | null;
  lastLoss: number | null;
  tokensPerS: number | null;
  lossScale: number | null;
  pnodes: string[];
  createdAt: number | null;
  startedAt: number | null;
  endedAt: number | null;
  reason: string | null;
}

export interface SessionDetail extends SessionSummary {
  tokens: number | null;
  bytesAcrossPerStep: number | null;
  /** data-parallel replicas of the pipeline in the current allocation */
  replicas: number | null;
  /** what it was created with, defaults filled in; null for a config this build cannot read */
  overview: SessionOverview | null;
  markers: StepMarker[];
}

export interface ValueCount {
  value: string;
  vnodes: number;
}

/** A session's network as it is placed (the config's precision and wire applied). */
export interface NetworkSummary {
  name: string;
  vnodes: number;
  parameters: number;
  vocabSize: number;
  context: number;
  precision: ValueCount[];
  wire: ValueCount[];
}

/** A session's settings as the monitor reads them from its config (services/monitor/overview.py). */
export interface SessionOverview {
  network: NetworkSummary | null;
  networkProblem: string | null;
  data: string[];
  split: string;
  validationSplit: string;
  steps: number;
  batchSize: number;
  microBatches: number;
  microBatchSize: number;
  tokensPerStep: number | null;
  seed: number;
  lrPeak: number;
  lrWarmupSteps: number;
  lrMin: number;
  betas: number[];
  weightDecay: number;
  noDecay: string[];
  gradClip: number;
  replicas: string;
  sync: string;
  syncInnerSteps: number | null;
  schedule: string;
  lossScaling: string;
  verifyRate: number;
  initFrom: string | null;
}

/** Where training was interrupted or changed course, at the step it went on with. */
export interface StepMarker {
  kind: string;
  step: number;
  ts: number;
  type: string;
  text: string;
}

/** A PNode's place in one session: a stage of a replica's pipeline, a standby, or idle; and why. */
export interface PNodeRole {
  sessionId: string;
  kind: "stage" | "standby" | "idle";
  replica: number | null;
  stage: number | null;
  stages: number | null;
  replicas: number;
  vnodes: string[];
  why: string;
}

/** One line of a chart with a line per name (a PNode, a VNode group): its values at its steps. */
export interface NamedSeries {
  name: string;
  step: number[];
  value: (number | null)[];
}

export interface Validation {
  step: number;
  ts: number;
  loss: number | null;
}

/** What the model wrote from the checkpoint after `step` steps, one text per prompt. */
export interface StepSamples {
  step: number;
  ts: number;
  texts: { prompt: string; text: string; tokens: number }[];
}

export interface SessionEvent {
  seq: number;
  id: string;
  type: string;
  ts: number;
  actor: string;
  payload: Record<string, unknown> | null;
}

export interface VNode {
  id: string;
  op: string | null;
  params: number | null;
  precision: string | null;
  pnode: string;
  replica: number;
}

/** One data-parallel replica: a whole copy of the network on its own PNodes. */
export interface Replica {
  index: number;
  pnodes: string[];
}

export interface Edge {
  src: string;
  dst: string;
  /** carried per step when the edge crosses PNodes */
  bytesPerStep: number;
  crosses: boolean;
  /** what the link between its PNodes carries, as they measured it (null inside a PNode) */
  linkBandwidthBytesPerS: number | null;
}

/** Tensors from one PNode to another over the session's last steps (measured). */
export interface Link {
  src: string;
  dst: string;
  bytesPerStep: number;
  bandwidthBytesPerS: number | null;
  latencyS: number | null;
}

/** What a PNode measured of its compute and its link to the bus. */
export interface Throughput {
  flopsPerS: number;
  bandwidthBytesPerS: number;
  rttS: number;
}

/** Shares of a PNode's last steps; sending overlaps computing, so they need not add up to 1. */
export interface TimeShare {
  steps: number;
  stepS: number;
  compute: number;
  send: number;
  wait: number;
  sentBytesPerStep: number;
}

/** What the monitor says of a PNode (services/monitor/reads.py: live unless an event or a silent heartbeat says otherwise). */
export type PNodeState = "live" | "lost" | "left" | "quarantined";

/** How the spot checks of a PNode's results went (recomputed elsewhere: equal, different, not finished). */
export interface CheckCounts {
  passed: number;
  failed: number;
  abandoned: number;
}

/** Bytes a PNode holds by category, as the PNode measures them. */
export type BytesByCategory = Record<string, number>;

/** What one VNode a PNode hosts holds there, in bytes by kind (a tied weight counts under its owner). */
export interface HostedVNodeMemory {
  sessionId: string;
  vnode: string;
  params: number;
  weights: number;
  master: number;
  optimizer: number;
  gradients: number;
  activations: number;
}

export interface PNodeSummary {
  id: string;
  host: string | null;
  device: string | null;
  memoryBytes: number | null;
  state: PNodeState;
  heartbeatAgeS: number | null;
  rssBytes: number | null;
  gpuAllocatedBytes: number | null;
  gpuReservedBytes: number | null;
  bytesByCategory: BytesByCategory | null;
  pendingRequests: number | null;
  hostedVNodes: string[];
  /** each VNode it hosts for your sessions, from its latest memory sample */
  vnodeMemory: HostedVNodeMemory[];
  quarantinedAt: number | null;
  quarantineReason: string | null;
  checks: CheckCounts;
  throughput: Throughput | null;
}

export interface Topology {
  sessionId: string;
  /** the replica whose VNodes and edges these are */
  replica: number;
  replicas: Replica[];
  vnodes: VNode[];
  edges: Edge[];
  links: Link[];
  pnodes: PNodeWithTime[];
  bytesAcrossPerStep: number | null;
}

export interface MemoryPoint {
  ts: number;
  rssBytes: number | null;
  gpuAllocatedBytes: number | null;
  gpuReservedBytes: number | null;
  pendingRequests: number | null;
}

export interface RequestStatus {
  sessionId: string;
  request: string;
  step: number | null;
  state: string;
  ts: number;
  durationS: number | null;
}

export interface PNodeWithTime extends PNodeSummary {
  timeShare: TimeShare | null;
  roles: PNodeRole[];
}

export interface PNodeDetail extends PNodeWithTime {
  memory: MemoryPoint[];
  requests: RequestStatus[];
}

export interface CommandAccepted {
  sessionId: string;
  commandId: string;
}
