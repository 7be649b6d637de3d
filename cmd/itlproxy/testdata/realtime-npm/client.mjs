// The client of itlproxy's Realtime test: the official openai package's
// OpenAIRealtimeWS, which dials wss://{baseURL}/realtime?model=..., here
// through the proxy's TLS listener (the test's CA in NODE_EXTRA_CA_CERTS).
//
// Environment: BASE_URL (https://host:port/v1), MODEL, DEFLATE ("false"
// to offer no permessage-deflate; the ws package offers it by default),
// STEPS, a JSON list of steps, each {"send": <client event>,
// "server": true when the server begins the response itself,
// "cancelAfter": n, "leaveAfter": n ("terminate": drop the socket after n
// deltas)}. Each step waits for its response's response.done (or an error
// naming it, or the connection's end).
//
// It prints one JSON object: for each response, its id, when it started
// (the response.create sent, or the response.created received when the
// server began it), when each output delta arrived, its status and
// usage.output_tokens, all on this process's clock in milliseconds; and
// every message it sent and received, as text.
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const deltas = new Set([
  'response.output_text.delta', 'response.output_audio.delta', 'response.output_audio_transcript.delta',
  'response.function_call_arguments.delta', 'response.text.delta', 'response.audio.delta',
  'response.audio_transcript.delta',
]);
const now = () => performance.timeOrigin + performance.now();

const client = new OpenAI({ apiKey: 'sk-test', baseURL: process.env.BASE_URL });
const rt = new OpenAIRealtimeWS(
  { model: process.env.MODEL, options: { perMessageDeflate: process.env.DEFLATE !== 'false' } },
  client,
);
const out = { responses: [], sent: [], received: [], negotiated: '' };
let current = null; // the step in progress: its response and what ends it
let closed = false;

rt.socket.on('upgrade', (res) => { out.negotiated = res.headers['sec-websocket-extensions'] ?? ''; });
rt.socket.on('message', (data) => out.received.push(data.toString()));
rt.on('error', () => {}); // an error event is a response's end, read below
rt.socket.on('close', () => {
  closed = true;
  current?.finish();
});
rt.on('event', (ev) => {
  const at = now();
  const r = current?.response;
  if (!r) return;
  if (ev.type === 'response.created' && r.id === '') {
    r.id = ev.response.id;
    if (current.step.server) r.start = at;
  } else if (deltas.has(ev.type) && ev.response_id === r.id) {
    r.deltas.push(at);
    if (r.deltas.length === current.step.cancelAfter) send({ type: 'response.cancel' });
    if (r.deltas.length === current.step.leaveAfter) rt.socket.terminate();
  } else if (ev.type === 'response.done' && ev.response.id === r.id) {
    r.status = ev.response.status;
    r.output = ev.response.usage?.output_tokens ?? r.deltas.length;
    current.finish();
  } else if (ev.type === 'error' && ev.error?.response_id === r.id) {
    r.status = 'error';
    r.output = r.deltas.length;
    current.finish();
  }
});

function send(event) {
  const text = JSON.stringify(event);
  out.sent.push(text);
  rt.send(event);
}

// run sends a step's event and resolves when its response has ended.
function run(step) {
  return new Promise((resolve) => {
    const response = { id: '', start: 0, deltas: [], status: '', output: 0 };
    current = {
      step, response,
      finish() {
        if (response.status === '') response.output = response.deltas.length;
        out.responses.push(response);
        current = null;
        resolve();
      },
    };
    response.start = now();
    send(step.send);
  });
}

await new Promise((resolve, reject) => {
  rt.socket.once('open', resolve);
  rt.socket.once('error', reject);
});
for (const step of JSON.parse(process.env.STEPS)) {
  if (closed) break;
  await run(step);
}
if (!closed) {
  rt.close({ code: 1000, reason: 'done' });
  await new Promise((resolve) => rt.socket.once('close', resolve));
}
process.stdout.write(JSON.stringify(out));
