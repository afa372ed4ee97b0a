// A run's output as the run view receives it (run_view.js's RunView): which part of a live chunk is
// new to the page, the batcher that draws live chunks once a frame, and ANSI colours read into
// segments the view makes spans of (the text itself only ever textContent). No DOM here: node's
// tests (tests/js) import it.

// Offsets and lengths count UTF-8 bytes, as the stored log does, while a string counts UTF-16
// units: what a message repeats is cut off by bytes. Messages hold whole characters, so the cut
// falls between two of them.
export function dropBytes(text, count) {
  if (count <= 0) return text;
  return new TextDecoder().decode(new TextEncoder().encode(text).subarray(count));
}

// What a live chunk ({offset, length, data}: playground/live.py) adds to a stream the page has
// shown `have` bytes of: null when it starts past them (a gap: the page reads the stored log
// instead), else the text not shown yet ("" for a repeat) and how many bytes are shown after it.
export function chunkNews(have, chunk) {
  if (chunk.offset > have) return null;
  return { text: dropBytes(chunk.data, have - chunk.offset), shown: Math.max(have, chunk.offset + chunk.length) };
}

// ANSI SGR sequences ("ESC[1;31m"): bold, the eight colours and their bright forms (shown alike),
// resets; any other code is left out.
// eslint-disable-next-line no-control-regex -- ESC (0x1b) is what starts every such sequence
const SGR = /\x1b\[([0-9;]*)m/g;

// `text` as segments [{text, fg, bold}] (fg: 0-7, or null for the default colour), the sequences
// taken out. `state` ({fg, bold}) is the colour a stream is in; it is read and updated, so that a
// colour set in one chunk carries on into the next.
export function ansiSegments(text, state) {
  const segments = [];
  const add = (part) => { if (part) segments.push({ text: part, fg: state.fg, bold: state.bold }); };
  let last = 0;
  for (const match of text.matchAll(SGR)) {
    add(text.slice(last, match.index));
    for (const code of (match[1] || "0").split(";").map(Number)) {
      if (code === 0) { state.fg = null; state.bold = false; }
      else if (code === 1) state.bold = true;
      else if (code >= 30 && code <= 37) state.fg = code - 30;
      else if (code >= 90 && code <= 97) state.fg = code - 90;
      else if (code === 39) state.fg = null;
    }
    last = match.index + match[0].length;
  }
  add(text.slice(last));
  return segments;
}

// Live chunks arrive one websocket message each, hundreds a second from a chatty program; drawing
// each on its own lays the page out that often and makes a span per message. The batcher keeps
// what arrives, per stream and in order, and hands it to `draw(stream, text)` once per `schedule`
// (the browser's requestAnimationFrame; a test passes its own). `drain` draws what waits at once:
// the view calls it before it adds text from elsewhere (the stored log), so a stream stays in
// order. `clear` drops what waits (the view is given another run); a frame asked for before it
// draws nothing.
export class LiveBatcher {
  constructor(draw, schedule) {
    this.draw = draw;
    this.schedule = schedule;
    this.pending = new Map();
    this.asked = false;
    this.epoch = 0;
  }

  add(stream, text) {
    if (!text) return;
    this.pending.set(stream, (this.pending.get(stream) || "") + text);
    if (this.asked) return;
    this.asked = true;
    const epoch = this.epoch;
    this.schedule(() => { if (epoch === this.epoch) this.drain(); });
  }

  drain() {
    const pending = this.pending;
    this.clear();
    for (const [stream, text] of pending) this.draw(stream, text);
  }

  clear() {
    this.pending = new Map();
    this.asked = false;
    this.epoch += 1;
  }

  get waiting() {
    let count = 0;
    for (const text of this.pending.values()) count += text.length;
    return count;
  }
}
