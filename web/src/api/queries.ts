// Every GraphQL document the dashboard sends, as template literals marked with a GraphQL comment. tests/unit/monitor/test_graphql_contract.py
// validates each against services/monitor/schema.graphql, and graphql-codegen (`npm run codegen`) writes the type
// of each result into ./types.ts, a fragment's under the fragment's name: the shapes the views use are these
// fragments. A document names the fragments it spreads after itself (`${...}`), so the string sent is whole.

import { STEP_FRAGMENT, STEP_SERIES_FRAGMENT } from "./protocol";

const SESSION_SUMMARY = /* GraphQL */ `fragment SessionSummary on Session {
  id status commands step plannedSteps verifies lastLoss tokensPerS lossScale pnodes createdAt startedAt endedAt reason
}`;

const VALUE_COUNT = /* GraphQL */ `fragment ValueCount on ValueCount { value vnodes }`;

const SESSION_OVERVIEW = /* GraphQL */ `fragment SessionOverview on SessionOverview {
  network { name vnodes parameters vocabSize context precision { ...ValueCount } wire { ...ValueCount } }
  networkProblem data split validationSplit steps batchSize microBatches microBatchSize tokensPerStep seed lrPeak
  lrWarmupSteps lrMin betas weightDecay noDecay gradClip replicas sync syncInnerSteps schedule lossScaling verifyRate initFrom
} ${VALUE_COUNT}`;

const STEP_MARKER = /* GraphQL */ `fragment StepMarker on StepMarker { kind step ts type text }`;

const SESSION_DETAIL = /* GraphQL */ `fragment SessionDetail on Session {
  ...SessionSummary tokens bytesAcrossPerStep replicas overview { ...SessionOverview } markers { ...StepMarker }
} ${SESSION_SUMMARY} ${SESSION_OVERVIEW} ${STEP_MARKER}`;

const HOSTED_VNODE_MEMORY = /* GraphQL */ `fragment HostedVNodeMemory on VNodeMemory {
  sessionId vnode params weights master optimizer gradients activations
}`;

const PNODE_SUMMARY = /* GraphQL */ `fragment PNodeSummary on PNode {
  id host device memoryBytes state heartbeatAgeS rssBytes gpuAllocatedBytes gpuReservedBytes bytesByCategory pendingRequests
  hostedVNodes vnodeMemory { ...HostedVNodeMemory }
  throughput { flopsPerS bandwidthBytesPerS rttS } quarantinedAt quarantineReason checks { passed failed abandoned }
} ${HOSTED_VNODE_MEMORY}`;

const TIME_SHARE = /* GraphQL */ `fragment TimeShare on TimeShare { steps stepS compute send wait sentBytesPerStep }`;

const PNODE_ROLE = /* GraphQL */ `fragment PNodeRole on PNodeRole { sessionId kind replica stage stages replicas vnodes why }`;

// reads per PNode: asked for by the polled queries, not by the live subscription's snapshot every second
const PNODE_WITH_TIME = /* GraphQL */ `fragment PNodeWithTime on PNode {
  ...PNodeSummary timeShare { ...TimeShare } roles { ...PNodeRole }
} ${PNODE_SUMMARY} ${TIME_SHARE} ${PNODE_ROLE}`;

const MEMORY_POINT = /* GraphQL */ `fragment MemoryPoint on MemoryPoint { ts rssBytes gpuAllocatedBytes gpuReservedBytes pendingRequests }`;

const REQUEST_STATUS = /* GraphQL */ `fragment RequestStatus on RequestStatus { sessionId request step state ts durationS }`;

const PNODE_DETAIL = /* GraphQL */ `fragment PNodeDetail on PNode {
  ...PNodeWithTime memory(since: $since) { ...MemoryPoint } requests(limit: 8) { ...RequestStatus }
} ${PNODE_WITH_TIME} ${MEMORY_POINT} ${REQUEST_STATUS}`;

const SESSION_EVENT = /* GraphQL */ `fragment SessionEvent on Event { seq id type ts actor payload }`;

const NAMED_SERIES = /* GraphQL */ `fragment NamedSeries on NamedSeries { name step value }`;

const VALIDATION = /* GraphQL */ `fragment Validation on Validation { step ts loss }`;

const STEP_SAMPLES = /* GraphQL */ `fragment StepSamples on StepSamples { step ts texts { prompt text tokens } }`;

const VNODE = /* GraphQL */ `fragment VNode on VNode { id op params precision pnode replica }`;

const EDGE = /* GraphQL */ `fragment Edge on Edge { src dst bytesPerStep fp32BytesPerStep compression crosses linkBandwidthBytesPerS }`;

const LINK = /* GraphQL */ `fragment Link on Link { src dst bytesPerStep bandwidthBytesPerS latencyS }`;

const TOPOLOGY = /* GraphQL */ `fragment Topology on Topology {
  sessionId bytesAcrossPerStep replica replicas { index pnodes }
  vnodes { ...VNode } edges { ...Edge } links { ...Link } pnodes { ...PNodeWithTime }
} ${VNODE} ${EDGE} ${LINK} ${PNODE_WITH_TIME}`;

export const ME = /* GraphQL */ `query Me { me { name } }`;

export const SESSIONS = /* GraphQL */ `query Sessions { sessions { ...SessionSummary } } ${SESSION_SUMMARY}`;

export const SESSION = /* GraphQL */ `query Session($id: ID!) { session(id: $id) { ...SessionDetail } } ${SESSION_DETAIL}`;

export const STEPS = /* GraphQL */ `query Steps($id: ID!, $from: Int, $to: Int, $maxPoints: Int) {
  session(id: $id) { steps(from: $from, to: $to, maxPoints: $maxPoints) { ...StepSeriesFields } }
} ${STEP_SERIES_FRAGMENT}`;

export const DIAGNOSTICS = /* GraphQL */ `query Diagnostics($id: ID!) {
  session(id: $id) { pnodeThroughput { ...NamedSeries } pnodeBusy { ...NamedSeries } updateRatios { ...NamedSeries } }
} ${NAMED_SERIES}`;

export const VALIDATIONS = /* GraphQL */ `query Validations($id: ID!) { session(id: $id) { validations { ...Validation } } }
${VALIDATION}`;

export const SAMPLES = /* GraphQL */ `query Samples($id: ID!) { session(id: $id) { samples(limit: 20) { ...StepSamples } } }
${STEP_SAMPLES}`;

// StepCompleted is in the step charts already, and ChecksCompleted in the PNodes' check counts; hundreds of
// thousands of them would drown the timeline (a failed check and a quarantine are events of their own)
export const TIMELINE_HIDDEN = ["StepCompleted", "ChecksCompleted"];
export const TIMELINE = /* GraphQL */ `query Timeline($id: ID!, $hidden: [String!]) {
  session(id: $id) { events(limit: 500, excludeTypes: $hidden) { ...SessionEvent } }
} ${SESSION_EVENT}`;

export const STEPS_LIVE = /* GraphQL */ `subscription StepsLive($id: ID!) { steps(sessionId: $id) { ...StepFields } }
${STEP_FRAGMENT}`;

export const EVENTS_LIVE = /* GraphQL */ `subscription EventsLive($id: ID!) { sessionEvents(sessionId: $id) { ...SessionEvent } }
${SESSION_EVENT}`;

export const TOPOLOGY_PAGE = /* GraphQL */ `query TopologyPage($id: ID!, $replica: Int) {
  topology(sessionId: $id, replica: $replica) { ...Topology }
} ${TOPOLOGY}`;

export const PNODES = /* GraphQL */ `query PNodes($since: Float, $ids: [ID!]) { pnodes(ids: $ids) { ...PNodeDetail } }
${PNODE_DETAIL}`;

// every PNode, as the live subscription has them: the PNodes page's first load (its overview)
export const PNODE_LIST = /* GraphQL */ `query PNodeList { pnodes { ...PNodeSummary } } ${PNODE_SUMMARY}`;

export const PNODES_LIVE = /* GraphQL */ `subscription PNodesLive { pnodes { ...PNodeSummary } } ${PNODE_SUMMARY}`;
