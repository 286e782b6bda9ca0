// What a request costs, decided by whoever writes its usage record (core/usage.ts), from the
// prices in force where it ran: its version's `pricing`, else the platform's EMBERS_PRICE_*
// defaults as that process read them. Records carry the prices and the cost, so a price change
// is never applied to requests that ran before it.

export interface Pricing {
  perRequest: number;
  perComputeSecond: number;
}

export const FREE: Pricing = Object.freeze({ perRequest: 0, perComputeSecond: 0 });

/** The prices of a version: its own (a missing part is 0, as the manifest's schema defaults it), else the platform's. */
export function pricesFor(own: Partial<Pricing> | undefined, platform: Pricing): Pricing {
  if (!own) return { perRequest: platform.perRequest, perComputeSecond: platform.perComputeSecond };
  return { perRequest: own.perRequest ?? 0, perComputeSecond: own.perComputeSecond ?? 0 };
}

/**
 * One request's charge: its price plus its handler time at the compute-second price, rounded to
 * 1e-9 so that sums of many stay exact to the 1e-6 that reports show.
 */
export function chargeOf(p: Pricing, computeMs: number): number {
  const ms = Number.isFinite(computeMs) && computeMs > 0 ? computeMs : 0;
  return roundCost(p.perRequest + (ms / 1000) * p.perComputeSecond, 1e9);
}

/** A cost rounded to `per` parts of a unit (reports: 1e6). */
export function roundCost(x: number, per = 1e6): number {
  return Math.round(x * per) / per;
}
