// The gateway's input checks: authors' patterns never backtrack in the shared gateway.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compileInputSchema, describeErrors } from '../../core/validate.ts';

const withPattern = (pattern: string) => compileInputSchema({ type: 'object', properties: { x: { type: 'string', pattern } } });

describe('input schema validation', () => {
  it('a pattern that backtracks exponentially is judged in linear time', () => {
    // On V8's default engine each extra "a" doubles the time: 40 of them run for hours, and this
    // test would time out. The linear engine answers at once.
    const v = withPattern('^(a+)+$');
    assert.equal(v({ x: `${'a'.repeat(40)}!` }), false);
    assert.equal(v({ x: 'aaaa' }), true);
    assert.equal(withPattern('^(a|a)*$')({ x: `${'a'.repeat(40)}!` }), false);
  });

  it('patterns are enforced, with the message the caller gets', () => {
    const v = withPattern('^[a-z]+$');
    assert.equal(v({ x: 'abc' }), true);
    assert.equal(v({ x: 'ab1' }), false);
    assert.equal(describeErrors(v), '/x must match pattern "^[a-z]+$"');
  });

  it('patterns compile as the author\'s JavaScript regex did, not in Unicode mode', () => {
    // z.string().regex(/^[\w-.]+$/) is valid JavaScript and a syntax error with the u flag.
    const v = withPattern('^[\\w-.]+$');
    assert.equal(v({ x: 'a-b.c_1' }), true);
    assert.equal(v({ x: 'a b' }), false);
  });

  it('what the linear engine cannot judge exactly passes here, for the replica to judge', () => {
    // Back-references and lookarounds need backtracking; \p{…} needs the u flag the engine lacks;
    // characters outside the BMP read differently without it. The replica checks every input
    // against the function's zod schema, so these are not let through unchecked.
    assert.equal(withPattern('^(a+)\\1$')({ x: 'aaa' }), true);
    assert.equal(withPattern('^(?=b)a$')({ x: 'a' }), true);
    assert.equal(withPattern('^\\p{L}+$')({ x: '123' }), true);
    assert.equal(withPattern('^.$')({ x: '😀' }), true);
    assert.equal(withPattern('^.$')({ x: 'ab' }), false);
  });

  it('two schemas with the same $id do not collide, and an invalid schema throws', () => {
    const b = compileInputSchema({ $id: 'input', type: 'string', pattern: '^b' });
    const c = compileInputSchema({ $id: 'input', type: 'string', pattern: '^c' });
    assert.equal(b('b'), true);
    assert.equal(c('b'), false);
    assert.throws(() => compileInputSchema({ type: 'nonsense' }), /schema is invalid/);
    assert.throws(() => compileInputSchema({ type: 'string', pattern: '(' }), /Invalid regular expression/);
  });
});
