"""GET /: type text, pick a voice, hear it as it streams (16-bit PCM played through Web Audio)."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kokoro_gpu</title>
<style>
body { font-family: sans-serif; max-width: 44rem; margin: 2rem auto; padding: 0 1rem; }
textarea { width: 100%; height: 8rem; font-size: 1rem; }
.row { display: flex; gap: 0.5rem; align-items: center; margin: 0.5rem 0; flex-wrap: wrap; }
#status { color: #444; }
</style>
</head>
<body>
<h1>kokoro_gpu</h1>
<textarea id="text">Hello! This is Kokoro, speaking as the audio streams in.</textarea>
<div class="row">
  <label>Voice <select id="voice"></select></label>
  <label>Speed <input id="speed" type="number" min="0.25" max="4" step="0.05" value="1"></label>
  <label>API key <input id="key" type="password" placeholder="if the server needs one"></label>
  <button id="speak">Speak</button>
  <button id="stop">Stop</button>
</div>
<div id="status">Ready.</div>
<script>
"use strict";
const RATE = 24000;
const statusLine = document.getElementById("status");
// What the page has played, for people (status line) and for automated checks.
window.kokoroPlayback = {samples: 0, started: false, done: false, error: null, firstAudioMs: null};
let context = null;
let controller = null;

function headers() {
  const h = {"Content-Type": "application/json"};
  const key = document.getElementById("key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function loadVoices() {
  const select = document.getElementById("voice");
  try {
    const response = await fetch("/v1/audio/voices", {headers: headers()});
    if (!response.ok) throw new Error((await response.json()).error.message);
    for (const voice of await response.json()) {
      const option = document.createElement("option");
      option.value = voice.id;
      option.textContent = voice.name;
      select.appendChild(option);
    }
  } catch (e) {
    statusLine.textContent = "Cannot list voices: " + e.message;
  }
}

async function speak() {
  if (controller) controller.abort();
  controller = new AbortController();
  context = context || new AudioContext({sampleRate: RATE});
  await context.resume();
  const playback = window.kokoroPlayback = {samples: 0, started: false, done: false, error: null,
                                            firstAudioMs: null};
  const sent = performance.now();
  let playAt = context.currentTime + 0.05;
  let carry = new Uint8Array(0);
  statusLine.textContent = "Requesting...";
  try {
    const response = await fetch("/v1/audio/speech", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({model: "kokoro", input: document.getElementById("text").value,
                            voice: document.getElementById("voice").value,
                            speed: parseFloat(document.getElementById("speed").value),
                            response_format: "pcm"})});
    if (!response.ok) throw new Error((await response.json()).error.message);
    const reader = response.body.getReader();
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      // 16-bit samples may straddle network chunks: keep an odd byte for the next one.
      const bytes = new Uint8Array(carry.length + value.length);
      bytes.set(carry);
      bytes.set(value, carry.length);
      const usable = bytes.length - (bytes.length % 2);
      carry = bytes.slice(usable);
      if (!usable) continue;
      const pcm = new Int16Array(bytes.buffer, 0, usable / 2);
      const buffer = context.createBuffer(1, pcm.length, RATE);
      const channel = buffer.getChannelData(0);
      for (let i = 0; i < pcm.length; i++) channel[i] = pcm[i] / 32768;
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(context.destination);
      playAt = Math.max(playAt, context.currentTime);
      source.start(playAt);
      playAt += buffer.duration;
      if (!playback.started) playback.firstAudioMs = performance.now() - sent;
      playback.started = true;
      playback.samples += pcm.length;
      statusLine.textContent = "Playing... " + (playback.samples / RATE).toFixed(2) + " s received";
    }
    playback.done = true;
    statusLine.textContent = "Done: " + (playback.samples / RATE).toFixed(2)
      + " s of audio, first audio after " + Math.round(playback.firstAudioMs) + " ms.";
  } catch (e) {
    playback.error = e.message;
    statusLine.textContent = e.name === "AbortError" ? "Stopped." : "Error: " + e.message;
  }
}

document.getElementById("speak").addEventListener("click", speak);
document.getElementById("stop").addEventListener("click", () => {
  if (controller) controller.abort();
  if (context) context.suspend();
});
loadVoices();
</script>
</body>
</html>
"""
