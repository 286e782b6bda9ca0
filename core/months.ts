// UTC periods: billing months (invoices, budgets and the month-to-date roll-ups in
// core/usage.ts go by them), and the hour and minute digits every usage roll-up key names. Pure:
// each takes the time it judges.

/** `YYYYMM` of a UTC time: the month roll-ups' key part. */
export const monthOf = (ms: number): string => utcDigits(ms, 7);

/** What toISOString writes (a UTC time): its periods are in its first characters, no Date needed. */
const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

/**
 * A UTC period of a time, digits only, as keys name it: its first 7 characters (YYYYMM), 13
 * (YYYYMMDDHH) or 16 (YYYYMMDDHHmm). A usage record's `at` is read as it is written; any other
 * text is parsed (now, if it is no time).
 */
export function utcDigits(at: string | number, chars: 7 | 13 | 16): string {
  const iso = typeof at === 'string' && ISO_UTC.test(at) ? at : new Date(typeof at === 'number' ? at : Date.parse(at) || Date.now()).toISOString();
  return iso.slice(0, chars).replace(/[-T:]/g, '');
}

/** `YYYY-MM` as the API writes it, from `YYYYMM`. */
export const monthLabel = (month: string): string => `${month.slice(0, 4)}-${month.slice(4, 6)}`;

/** `YYYYMM` from the API's `YYYY-MM`, or null when it is not a month (2026-13, 26-01, 2026-1). */
export function parseMonth(s: string): string | null {
  const m = /^(\d{4})-(\d{2})$/.exec(s);
  if (!m) return null;
  const month = Number(m[2]);
  return month >= 1 && month <= 12 && Number(m[1]) >= 1970 ? `${m[1]}${m[2]}` : null;
}

/** Start (inclusive) and end (exclusive) of a `YYYYMM` month, in ms. */
export function monthBounds(month: string): { start: number; end: number } {
  const [y, m] = [Number(month.slice(0, 4)), Number(month.slice(4, 6))];
  return { start: Date.UTC(y, m - 1, 1), end: Date.UTC(y, m, 1) };
}

/** Whole seconds from `now` to the end of its UTC month (at least 1): a budget refusal's Retry-After. */
export function secondsToMonthEnd(now: number): number {
  return Math.max(1, Math.ceil((monthBounds(monthOf(now)).end - now) / 1000));
}
