import { shipped, startTestPlatform, textImage } from './test/helpers/platform.ts';
const p = await startTestPlatform({ EMBERS_SCHEDULER_TICK_MS: '100' });
await p.deploy(shipped('ocr/index.ts'));
const image = (await textImage(['HELLO EMBERS 2026'])).toString('base64');
for (let i = 0; i < 3; i++) {
  const t0 = performance.now();
  const r = await p.fetch('/v1/run/ocr', { method: 'POST', body: JSON.stringify({ image }) });
  console.log(r.status, Math.round(performance.now() - t0), r.headers.get('server-timing'), r.headers.get('embers-cold-start'));
  for (const x of p.agent.running()) process.kill(x.pid!, 'SIGKILL');
  await new Promise(r => setTimeout(r, 1500));
}
await p.close();
