// Invoices and budgets without Redis: UTC months, prices, a month roll-up read as an invoice,
// budget verdicts and alert crossings, and the CLI's invoice table.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { alertId, crossings, exhausted, exhaustedMessage, monthToDate, type Budget } from '../../core/budgets.ts';
import { invoiceLines } from '../../core/invoice.ts';
import { monthBounds, monthLabel, monthOf, parseMonth, secondsToMonthEnd } from '../../core/months.ts';
import { chargeOf, pricesFor } from '../../core/pricing.ts';
import { monthField, monthKey, recordArgs, RECORD_FIELDS, type UsageRecord } from '../../core/usage.ts';
import { invoiceText } from '../../cli/commands/usage.ts';

describe('billing months', () => {
  it('goes by the UTC month, whatever the offset a time was written with', () => {
    assert.equal(monthOf(Date.parse('2026-11-30T23:59:59.999Z')), '202611');
    assert.equal(monthOf(Date.parse('2026-12-01T00:30:00+01:00')), '202611');
    assert.equal(monthLabel('202611'), '2026-11');
  });

  it('reads YYYY-MM and nothing else', () => {
    assert.equal(parseMonth('2026-02'), '202602');
    for (const bad of ['2026-13', '2026-00', '2026-2', '26-02', '2026/02', '2026-02-01', '']) assert.equal(parseMonth(bad), null, bad);
  });

  it('bounds a month, across a year and a leap February', () => {
    assert.deepEqual(monthBounds('202612'), { start: Date.parse('2026-12-01T00:00:00Z'), end: Date.parse('2027-01-01T00:00:00Z') });
    assert.equal((monthBounds('202802').end - monthBounds('202802').start) / 86_400_000, 29);
  });

  it('counts Retry-After to the month end, in whole seconds and at least one', () => {
    assert.equal(secondsToMonthEnd(Date.parse('2026-11-30T23:59:00Z')), 60);
    assert.equal(secondsToMonthEnd(Date.parse('2026-11-30T23:59:59.500Z')), 1);
    assert.equal(secondsToMonthEnd(Date.parse('2026-11-01T00:00:00Z')), 30 * 86_400);
  });
});

describe('prices', () => {
  it("takes the version's own prices (a part left out is 0), else the platform's", () => {
    const platform = { perRequest: 0.01, perComputeSecond: 0.5 };
    assert.deepEqual(pricesFor(undefined, platform), platform);
    assert.deepEqual(pricesFor({ perRequest: 0.2 }, platform), { perRequest: 0.2, perComputeSecond: 0 });
  });

  it('charges the request price and the handler time, rounded so sums stay exact', () => {
    assert.equal(chargeOf({ perRequest: 0.5, perComputeSecond: 2 }, 250), 1);
    assert.equal(chargeOf({ perRequest: 0.1, perComputeSecond: 0.3 }, 100), 0.13);
    assert.equal(chargeOf({ perRequest: 1, perComputeSecond: 1 }, Number.NaN), 1);
  });

  it("writes a record's cost and month field for the Lua call, a split version under its function", () => {
    const r = { id: 'j', tenant: 't_a', key: 'k', fn: 't_a.ocr@v3', version: 'v3', kind: 'sync', status: 200, queueMs: 1, computeMs: 10, inferMs: 0, coldMs: 0, bytesIn: 1, bytesOut: 2, at: '2026-11-30T23:59:59.000Z', price: { perRequest: 0.5, perComputeSecond: 0 }, cost: 0.5 } satisfies UsageRecord;
    const args = recordArgs(r);
    assert.equal(args.length, RECORD_FIELDS);
    assert.deepEqual(args.slice(-2), ['0.5', 't_a.ocr|v3|']);
    assert.equal(monthField(r), 't_a.ocr|v3|');
    assert.equal(monthKey(r), 'embers:usage:t_a:month:202611');
    assert.equal(monthKey({ tenant: 't_a', at: '2026-12-01T00:30:00+01:00' }), 'embers:usage:t_a:month:202611');
  });
});

describe('invoices', () => {
  it('sums a month roll-up per function and version, versions in order, and totals the lines', () => {
    const { lines, total } = invoiceLines({
      't_a.ocr|v10|requests': '1',
      't_a.ocr|v10|cost': '0.5',
      't_a.ocr|v2|requests': '3',
      't_a.ocr|v2|errors': '1',
      't_a.ocr|v2|compute_ms': '1500.0000000000002',
      't_a.ocr|v2|cold_ms': '250',
      't_a.ocr|v2|bytes_in': '30',
      't_a.ocr|v2|bytes_out': '60',
      't_a.ocr|v2|cost': '0.30000000000000004',
      'echo|v1|requests': '2',
      // The budgets' month-to-date totals are not lines.
      '*|requests': '6',
      '*|cost': '0.8',
    });
    assert.deepEqual(lines.map((l) => `${l.function} ${l.version}`), ['echo v1', 'ocr v2', 'ocr v10']);
    assert.deepEqual(lines[1], { function: 'ocr', version: 'v2', requests: 3, errors: 1, computeSeconds: 1.5, coldStartSeconds: 0.25, bytesIn: 30, bytesOut: 60, cost: 0.3 });
    assert.deepEqual(total, { requests: 6, errors: 1, computeSeconds: 1.5, coldStartSeconds: 0.25, bytesIn: 30, bytesOut: 60, cost: 0.8 });
  });

  it('prints a table with a total line, or says the month is empty', () => {
    const inv = { tenant: 't_a', month: '2026-11', from: '', to: '', ...invoiceLines({ 't_a.ocr|v1|requests': '2', 't_a.ocr|v1|cost': '1', 't_a.ocr|v2|requests': '1', 't_a.ocr|v2|cost': '0.25' }) };
    const text = invoiceText(inv).split('\n');
    assert.match(text[1], /^FUNCTION\s+VERSION\s+REQUESTS/);
    assert.match(text[2], /^ocr\s+v1\s+2\s.*1\.000000$/);
    assert.match(text[4], /^─+/);
    assert.match(text[5], /^TOTAL\s+3\s.*1\.250000$/);
    assert.match(invoiceText({ ...inv, lines: [] }), /no usage in 2026-11/);
  });
});

describe('budgets', () => {
  const budget: Budget = { monthlySpend: 10, monthlyComputeSeconds: 100, webhook: 'https://example.com/h', updatedAt: '' };

  it('is exhausted once usage reaches a budget, naming which', () => {
    assert.equal(exhausted(null, { cost: 1e9, computeSeconds: 1e9 }), null);
    assert.equal(exhausted(budget, { cost: 9.99, computeSeconds: 99 }), null);
    assert.deepEqual(exhausted(budget, { cost: 1, computeSeconds: 100 }), { kind: 'monthlyComputeSeconds', limit: 100, used: 100 });
    assert.deepEqual(exhausted({ monthlyComputeSeconds: 5, updatedAt: '' }, { cost: 1e9, computeSeconds: 1 }), null, 'no spend budget: spend is not judged');
    const message = exhaustedMessage('t_a', '202611', { kind: 'monthlySpend', limit: 10, used: 10.2 });
    assert.match(message, /t_a .*spend budget of 10 \(used 10\.2\) for 2026-11; runs resume at 2026-12-01T00:00:00\.000Z/);
  });

  it('reports each alert share reached, once per month, budget and amount', () => {
    assert.deepEqual(crossings(budget, { cost: 7.9, computeSeconds: 0 }), []);
    assert.deepEqual(crossings(budget, { cost: 8, computeSeconds: 0 }).map((c) => `${c.kind} ${c.threshold}`), ['monthlySpend 0.8']);
    assert.deepEqual(crossings(budget, { cost: 12, computeSeconds: 80 }).map((c) => `${c.kind} ${c.threshold}`), ['monthlySpend 0.8', 'monthlySpend 1', 'monthlyComputeSeconds 0.8']);
    const [c] = crossings(budget, { cost: 8, computeSeconds: 0 });
    assert.equal(alertId('t_a', '202611', c), 'budget.t_a.202611.monthlySpend.80.10');
    assert.notEqual(alertId('t_a', '202611', { ...c, limit: 20 }), alertId('t_a', '202611', c), 'a raised budget alerts again');
    assert.doesNotMatch(alertId('t_a', '202611', c), /:/, 'a BullMQ job id');
  });

  it('reads month-to-date totals from the roll-up fields, none yet as 0', () => {
    assert.deepEqual(monthToDate('1.5', '2500'), { cost: 1.5, computeSeconds: 2.5 });
    assert.deepEqual(monthToDate(null, null), { cost: 0, computeSeconds: 0 });
  });
});
