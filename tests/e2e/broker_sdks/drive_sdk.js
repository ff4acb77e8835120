// Drives one official SDK through the broker as an agent in the guest would:
// the nonce and the base URL in the SDK's own environment variables
// (ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL, OPENAI_API_KEY / OPENAI_BASE_URL),
// the provider's name resolving to the broker, the broker's CA trusted
// (NODE_EXTRA_CA_CERTS). One request without streaming, one streamed, no
// retries (a refusal must show, not be retried away).
//
// Usage: node drive_sdk.js SDK_DIR anthropic-sdk-0|anthropic-sdk-1|openai
// Prints one JSON line: {"sdk", "version", "text", "deltas", "key_headers"}
// (key_headers: where the SDK put its key, as seen by a fetch that records
// the header names and hands the request on unchanged), or {"error",
// "status", "refused"} (the broker's abox-refused) and exits 1.
'use strict';
const path = require('path');

const keyHeaders = new Set();
async function recordingFetch(url, init) {
  for (const [name] of new Headers((init && init.headers) || {})) {
    if (name === 'x-api-key' || name === 'authorization') keyHeaders.add(name);
  }
  return fetch(url, init);
}

async function anthropic(mod) {
  const Anthropic = mod.default || mod.Anthropic;
  const client = new Anthropic({maxRetries: 0, timeout: 15000, fetch: recordingFetch});
  const request = {model: 'abox-test', max_tokens: 16, messages: [{role: 'user', content: 'hi'}]};
  const message = await client.messages.create(request);
  const text = message.content.map((block) => block.text).join('');
  const stream = await client.messages.create({...request, stream: true});
  const deltas = [];
  for await (const event of stream) {
    if (event.type === 'content_block_delta') deltas.push(event.delta.text);
  }
  return {text, deltas};
}

async function openai(mod) {
  const OpenAI = mod.default || mod.OpenAI;
  const client = new OpenAI({maxRetries: 0, timeout: 15000, fetch: recordingFetch});
  const request = {model: 'abox-test', messages: [{role: 'user', content: 'hi'}]};
  const completion = await client.chat.completions.create(request);
  const text = completion.choices[0].message.content;
  const stream = await client.chat.completions.create({...request, stream: true});
  const deltas = [];
  for await (const chunk of stream) {
    const content = chunk.choices[0] && chunk.choices[0].delta && chunk.choices[0].delta.content;
    if (content) deltas.push(content);
  }
  return {text, deltas};
}

(async () => {
  const [sdkDir, sdk] = process.argv.slice(2);
  const where = path.join(sdkDir, 'node_modules', sdk);
  const mod = require(where);
  const version = require(path.join(where, 'package.json')).version;
  const got = sdk === 'openai' ? await openai(mod) : await anthropic(mod);
  console.log(JSON.stringify({sdk, version, ...got, key_headers: [...keyHeaders].sort()}));
})().catch((e) => {
  const headers = e && e.headers;
  const refused = headers && (typeof headers.get === 'function' ? headers.get('abox-refused') : headers['abox-refused']);
  console.log(JSON.stringify({error: String(e), status: e && e.status, refused}));
  process.exit(1);
});
