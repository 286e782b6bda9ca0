// The functions `npm run bench` deploys for its dynamic batching, light-model and composition
// sections (bench/functions): they deploy, answer, and give the same answer for the same input
// whether requests are batched or not, served by Embers, by the plain server or run raw, and
// whether `ocr` runs as one handler or as functions calling each other. The bench is not part of
// the tests; this keeps its functions and sides from rotting unseen.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import clsBatched from '../../bench/functions/cls-batched.ts';
import { turnBatched } from '../../bench/light.ts';
import { createSession, handlerContext, MODELS } from '../../bench/ort.ts';
import { startNaive } from '../../bench/servers.ts';
import { ROOT, shipped, startTestPlatform, textImage, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
const NAMES = ['cls-batched', 'cls-single'] as const;

before(async () => {
  p = await startTestPlatform();
  for (const name of NAMES) await p.deploy(path.join(ROOT, 'bench/functions', `${name}.ts`));
});
after(() => p?.close());

const run = (name: string, body: unknown) => p.fetch(`/v1/run/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('bench functions (the classifier, batched and batch-1)', () => {
  it('answer concurrent requests, the same for the same seed either way', async () => {
    const seeds = Array.from({ length: 16 }, (_, i) => i * 7919);
    const answers: Record<string, { angle: string; score: number }[]> = {};
    for (const name of NAMES) {
      // Concurrent, so the batched one has requests to put together (how many is its own choice).
      answers[name] = await Promise.all(
        seeds.map(async (seed) => {
          const res = await run(name, { seed });
          assert.equal(res.status, 200, await res.clone().text());
          return (await res.json()) as { angle: string; score: number };
        }),
      );
    }
    for (const [i, a] of answers['cls-batched'].entries()) {
      assert.ok(a.angle === '0' || a.angle === '180', JSON.stringify(a));
      assert.ok(a.score >= 0.5 && a.score <= 1, `the larger of two softmax outputs: ${a.score}`);
      const b = answers['cls-single'][i];
      assert.equal(b.angle, a.angle, `seed ${seeds[i]}`);
      assert.ok(Math.abs(b.score - a.score) < 1e-4, `seed ${seeds[i]}: ${a.score} batched, ${b.score} alone`);
    }
  });

  it('the light section\'s raw side and plain server answer as Embers does', async () => {
    const seeds = Array.from({ length: 8 }, (_, i) => i * 104729);
    const served = await Promise.all(seeds.map(async (seed) => (await (await run('cls-batched', { seed })).json()) as { angle: string; score: number }));
    const session = await createSession(MODELS.cls, 1);
    const plain = await startNaive();
    try {
      const ctx = handlerContext({ cls: turnBatched(session) }, { name: 'cls-batched', version: 'raw' }, 'raw');
      // Asked in one turn: their inferences run as one batch.
      const raw = await Promise.all(seeds.map((seed) => Promise.resolve(clsBatched.handler({ seed }, ctx))));
      const viaPlain = await Promise.all(
        seeds.map(async (seed) => {
          const res = await fetch(`http://127.0.0.1:${plain.port}/cls`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ seed }) });
          assert.equal(res.status, 200);
          return (await res.json()) as { angle: string; score: number };
        }),
      );
      for (const [i, a] of served.entries()) {
        for (const [side, b] of [['raw', raw[i]], ['plain', viaPlain[i]]] as const) {
          assert.equal(b.angle, a.angle, `${side}, seed ${seeds[i]}`);
          assert.ok(Math.abs(b.score - a.score) < 1e-4, `${side}, seed ${seeds[i]}: ${b.score} against Embers' ${a.score}`);
        }
      }
    } finally {
      await Promise.all([session.release(), plain.stop()]);
    }
  });

  it('answers a seed that is not a whole number with 400', async () => {
    const res = await run('cls-batched', { seed: 1.5 });
    assert.equal(res.status, 400);
    const { error } = (await res.json()) as { error: { code: string } };
    assert.equal(error.code, 'invalid_input');
  });
});

interface OcrAnswer {
  lines: { text: string; score: number; box: number[][] }[];
}

describe('bench functions (ocr split into ocr-det and ocr-rec, called by ocr-split; echo through one call)', () => {
  let png: Buffer;
  before(async () => {
    for (const file of [shipped('ocr/index.ts'), shipped('echo.ts'), ...['ocr-det', 'ocr-rec', 'ocr-split', 'echo-call'].map((n) => path.join(ROOT, 'bench/functions', `${n}.ts`))]) await p.deploy(file);
    png = await textImage(['SPLIT 46', 'ONE HOP EACH']);
  });

  const answer = async (name: string, body: unknown): Promise<{ json: unknown; timing: string }> => {
    const res = await run(name, body);
    assert.equal(res.status, 200, `${name}: ${await res.clone().text()}`);
    return { json: await res.json(), timing: res.headers.get('server-timing') ?? '' };
  };

  it('each stage answers alone, and ocr-split answers the lines ocr does, from JSON or the file as the body', async () => {
    const image = png.toString('base64');
    const { json: whole } = await answer('ocr', { image });
    const lines = (whole as OcrAnswer).lines;
    assert.deepEqual(lines.map((l) => l.text), ['SPLIT 46', 'ONE HOP EACH']);
    // The stages on their own first, so their replicas are up before a call waits on them.
    const { json: det } = await answer('ocr-det', { image });
    const { boxes } = det as { boxes: number[][][] };
    assert.equal(boxes.length, 2, JSON.stringify(det));
    const { json: rec } = await answer('ocr-rec', { image, boxes });
    assert.deepEqual(new Set((rec as { readings: { text: string }[] }).readings.map((r) => r.text.trim())), new Set(['SPLIT 46', 'ONE HOP EACH']));

    const viaJson = await answer('ocr-split', { image });
    const res = await p.fetch('/v1/run/ocr-split', { method: 'POST', headers: { 'content-type': 'image/png' }, body: new Uint8Array(png) });
    assert.equal(res.status, 200, await res.clone().text());
    for (const split of [viaJson.json as OcrAnswer, (await res.json()) as OcrAnswer]) {
      assert.equal(split.lines.length, lines.length, JSON.stringify(split));
      for (const [i, l] of lines.entries()) {
        assert.equal(split.lines[i].text, l.text);
        assert.deepEqual(split.lines[i].box, l.box);
        assert.ok(Math.abs(split.lines[i].score - l.score) < 1e-3, `${l.text}: ${split.lines[i].score} split, ${l.score} whole`);
      }
    }
    assert.match(viaJson.timing, /call;dur=/);
  });

  it('ocr-split passes ocr-det\'s 400 on for an image that does not decode', async () => {
    const res = await run('ocr-split', { image: Buffer.from('not an image').toString('base64') });
    assert.equal(res.status, 400, await res.clone().text());
  });

  it('echo-call answers what echo does, through one call', async () => {
    const body = { hello: 'embers', n: [1, 2, 3] };
    const [direct, called] = [await answer('echo', body), await answer('echo-call', body)];
    assert.deepEqual(called.json, direct.json);
    assert.match(called.timing, /call;dur=/);
    assert.doesNotMatch(direct.timing, /call;dur=/);
  });
});
