// Every GraphQL document the dashboard sends, in one place, so that they can be checked against
// services/monitor/schema.graphql at a glance.

import { STEP_FIELDS } from "./protocol";

const SESSION_SUMMARY = "id status step plannedSteps verifies lastLoss tokensPerS lossScale pnodes createdAt startedAt endedAt reason";
const STEP_COLUMNS = STEP_FIELDS.join(" ");
const PNODE_SUMMARY =
  "id host device memoryBytes state heartbeatAgeS rssBytes gpuAllocatedBytes gpuReservedBytes bytesByCategory pendingRequests hostedVNodes " +
  "vnodeMemory { sessionId vnode params weights master optimizer gradients activations } " +
  "throughput { flopsPerS bandwidthBytesPerS rttS } quarantinedAt quarantineReason checks { passed failed abandoned }";
// reads per PNode: asked for by the polled queries, not by the live subscription's snapshot every second
const TIME_SHARE = "timeShare { steps stepS compute send wait sentBytesPerStep } roles { sessionId kind replica stage stages replicas vnodes why }";
const OVERVIEW =
  "overview { network { name vnodes parameters vocabSize context precision { value vnodes } wire { value vnodes } } " +
  "networkProblem data split validationSplit steps batchSize microBatches microBatchSize tokensPerStep seed lrPeak " +
  "lrWarmupSteps lrMin betas weightDecay noDecay gradClip replicas sync syncInnerSteps schedule lossScaling verifyRate initFrom }";
const MARKERS = "markers { kind step ts type text }";

export const ME = "query Me { me { name } }";

export const SESSIONS = `query Sessions { sessions { ${SESSION_SUMMARY} } }`;

export const SESSION = `query Session($id: ID!) {
  session(id: $id) { ${SESSION_SUMMARY} tokens bytesAcrossPerStep replicas ${OVERVIEW} ${MARKERS} }
}`;

export const STEPS = `query Steps($id: ID!, $from: Int, $to: Int, $maxPoints: Int) {
  session(id: $id) { steps(from: $from, to: $to, maxPoints: $maxPoints) { ${STEP_COLUMNS} } }
}`;

export const DIAGNOSTICS = `query Diagnostics($id: ID!) {
  session(id: $id) { pnodeThroughput { name step value } pnodeBusy { name step value } updateRatios { name step value } }
}`;

export const VALIDATIONS = `query Validations($id: ID!) { session(id: $id) { validations { step ts loss } } }`;

export const SAMPLES = `query Samples($id: ID!) {
  session(id: $id) { samples(limit: 20) { step ts texts { prompt text tokens } } }
}`;

// StepCompleted is in the step charts already, and ChecksCompleted in the PNodes' check counts; hundreds of
// thousands of them would drown the timeline (a failed check and a quarantine are events of their own)
export const TIMELINE_HIDDEN = ["StepCompleted", "ChecksCompleted"];
export const TIMELINE = `query Timeline($id: ID!) {
  session(id: $id) { events(limit: 500, excludeTypes: ${JSON.stringify(TIMELINE_HIDDEN)}) { seq id type ts actor payload } }
}`;

export const STEPS_LIVE = `subscription StepsLive($id: ID!) { steps(sessionId: $id) { ${STEP_COLUMNS} } }`;

export const EVENTS_LIVE = `subscription EventsLive($id: ID!) {
  sessionEvents(sessionId: $id) { seq id type ts actor payload }
}`;

export const TOPOLOGY = `query Topology($id: ID!, $replica: Int) {
  topology(sessionId: $id, replica: $replica) {
    sessionId bytesAcrossPerStep replica replicas { index pnodes }
    vnodes { id op params precision pnode replica }
    edges { src dst bytesPerStep crosses linkBandwidthBytesPerS }
    links { src dst bytesPerStep bandwidthBytesPerS latencyS }
    pnodes { ${PNODE_SUMMARY} ${TIME_SHARE} }
  }
}`;

export const PNODES = `query PNodes($since: Float, $ids: [ID!]) {
  pnodes(ids: $ids) { ${PNODE_SUMMARY} ${TIME_SHARE} memory(since: $since) { ts rssBytes gpuAllocatedBytes gpuReservedBytes pendingRequests }
    requests(limit: 8) { sessionId request step state ts durationS } }
}`;

// every PNode, as the live subscription has them: the PNodes page's first load (its overview)
export const PNODE_LIST = `query PNodeList { pnodes { ${PNODE_SUMMARY} } }`;

export const PNODES_LIVE = `subscription PNodesLive { pnodes { ${PNODE_SUMMARY} } }`;

export const SESSION_COMMAND = {
  pause: "mutation Pause($id: ID!) { pauseSession(id: $id) { sessionId commandId } }",
  resume: "mutation Resume($id: ID!) { resumeSession(id: $id) { sessionId commandId } }",
  stop: "mutation Stop($id: ID!) { stopSession(id: $id) { sessionId commandId } }",
  delete: "mutation Delete($id: ID!) { deleteSession(id: $id) { sessionId commandId } }",
} as const;

export type SessionCommand = keyof typeof SESSION_COMMAND;
