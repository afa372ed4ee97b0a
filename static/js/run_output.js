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
// 256-colour and RGB foregrounds (as the nearest of the eight: IPython's tracebacks colour their code
// with them), resets; any other code, and any other control sequence ("ESC[K"), is left out.
// eslint-disable-next-line no-control-regex -- ESC (0x1b) is what starts every such sequence
const CSI = /\x1b\[([0-?]*)[ -/]*([@-~])/g;

// The nearest of the eight colours (0-7: black, red, green, yellow, blue, magenta, cyan, white) to
// an RGB colour, each channel 0-255: the channels over 60% as bright as the brightest are on.
function nearestColour(red, green, blue) {
  const top = Math.max(red, green, blue);
  if (top < 64) return 0;
  const on = (channel) => (channel * 5 > top * 3 ? 1 : 0);
  const colour = on(red) + 2 * on(green) + 4 * on(blue);
  return colour === 7 && top < 192 ? 0 : colour;  // a grey: dark or light
}

// A colour of the 256-colour palette: 0-15 are the eight and their bright forms, 16-231 a 6x6x6
// cube, 232-255 greys.
const CUBE = [0, 95, 135, 175, 215, 255];
function paletteColour(index) {
  if (index < 16) return index % 8;
  if (index < 232) {
    const at = index - 16;
    return nearestColour(CUBE[Math.floor(at / 36)], CUBE[Math.floor(at / 6) % 6], CUBE[at % 6]);
  }
  return nearestColour(...Array(3).fill(8 + 10 * (index - 232)));
}

// The codes of one SGR sequence, applied to `state` in order. 38 (a foreground) and 48 (a
// background, not drawn) take their arguments with them: "38;5;n" or "38;2;r;g;b".
function applyCodes(codes, state) {
  for (let at = 0; at < codes.length; at += 1) {
    const code = codes[at];
    if (code === 38 || code === 48) {
      const mode = codes[at + 1];
      const colour = mode === 5 ? paletteColour(codes[at + 2] ?? 0)
        : mode === 2 ? nearestColour(codes[at + 2] ?? 0, codes[at + 3] ?? 0, codes[at + 4] ?? 0) : null;
      if (code === 38 && colour !== null) state.fg = colour;
      at += mode === 5 ? 2 : mode === 2 ? 4 : 1;
    } else if (code === 0) { state.fg = null; state.bold = false; }
    else if (code === 1) state.bold = true;
    else if (code === 22) state.bold = false;
    else if (code >= 30 && code <= 37) state.fg = code - 30;
    else if (code >= 90 && code <= 97) state.fg = code - 90;
    else if (code === 39) state.fg = null;
  }
}

// `text` as segments [{text, fg, bold}] (fg: 0-7, or null for the default colour), the sequences
// taken out. `state` ({fg, bold}) is the colour a stream is in; it is read and updated, so that a
// colour set in one chunk carries on into the next.
export function ansiSegments(text, state) {
  const segments = [];
  const add = (part) => { if (part) segments.push({ text: part, fg: state.fg, bold: state.bold }); };
  let last = 0;
  for (const match of text.matchAll(CSI)) {
    add(text.slice(last, match.index));
    if (match[2] === "m") applyCodes((match[1] || "0").split(";").map((part) => Number(part || 0)), state);
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
