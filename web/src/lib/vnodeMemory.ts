// Memory of one VNode by category, from its parameter count and precision. PNodes measure
// bytes per PNode, not per VNode, so the VNode panel shows this estimate next to its PNode's
// measured figures. The categories follow the PNode's (services/pnode/memory.py): weights in the
// VNode's precision, fp32 master copies only for low-precision weights, Adam's two fp32 moments,
// and gradients in the VNode's precision.

const BYTES: Record<string, number> = { fp32: 4, float32: 4, bf16: 2, bfloat16: 2, fp16: 2, float16: 2 };

export interface VNodeMemory {
  weights: number;
  master: number;
  optimizer: number;
  gradients: number;
}

/** null when the parameter count or the precision is unknown. */
export function vnodeMemory(params: number | null, precision: string | null): VNodeMemory | null {
  const size = precision ? BYTES[precision.toLowerCase()] : undefined;
  if (params === null || size === undefined) return null;
  return {
    weights: params * size,
    master: size === 4 ? 0 : params * 4,
    optimizer: params * 8,
    gradients: params * size,
  };
}
