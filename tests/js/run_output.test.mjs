// static/js/run_output.js: which part of a live chunk the page has not shown yet (offsets in UTF-8
// bytes), the batcher that draws live chunks once a frame, and ANSI colours read into segments.
import assert from "node:assert/strict";
import { test } from "node:test";

import { LiveBatcher, ansiSegments, chunkNews, dropBytes } from "../../static/js/run_output.js";

const bytes = (text) => new TextEncoder().encode(text).length;
const chunk = (offset, data) => ({ type: "chunk", stream: "stdout", offset, data, length: bytes(data) });

test("dropping bytes counts UTF-8 bytes, not characters", () => {
  assert.equal(dropBytes("abc", 1), "bc");
  assert.equal(dropBytes("€€x", 3), "€x");  // € is three bytes
  assert.equal(dropBytes("😀x", 4), "x");  // four bytes, two UTF-16 units
  assert.equal(dropBytes("é😀", 2), "😀");
});

test("dropping no bytes, fewer than none or all of them", () => {
  assert.equal(dropBytes("€", 0), "€");
  assert.equal(dropBytes("€", -5), "€");
  assert.equal(dropBytes("€", 3), "");
  assert.equal(dropBytes("€", 10), "");
});

test("a chunk where the page's stream ends is shown whole", () => {
  assert.deepEqual(chunkNews(0, chunk(0, "hello\n")), { text: "hello\n", shown: 6 });
  assert.deepEqual(chunkNews(6, chunk(6, "€")), { text: "€", shown: 9 });
});

test("a chunk past what the page has is a gap, not news", () => {
  assert.equal(chunkNews(6, chunk(7, "x")), null);
  assert.equal(chunkNews(0, chunk(1, "")), null);
});

test("a chunk the page has whole is a repeat: nothing to show and nothing counted again", () => {
  assert.deepEqual(chunkNews(9, chunk(0, "€€€")), { text: "", shown: 9 });
  assert.deepEqual(chunkNews(20, chunk(3, "€")), { text: "", shown: 20 });  // an old one never moves it back
});

test("a chunk that overlaps what the page has shows only its bytes past it", () => {
  // The replay sent bytes 0-300; the live chunk from byte 150 repeats its first 50 characters.
  assert.deepEqual(chunkNews(300, chunk(150, "€".repeat(100))), { text: "€".repeat(50), shown: 450 });
});

test("a replay, live chunks overlapping it, a repeat and an empty chunk add up to the output once", () => {
  // Lines of 11, 12 and 16 bytes: € at bytes 7-9, 😀 at 18-21. Messages hold whole characters.
  const output = "tick 0 €\ntick 1 😀\n\x1b[31mtick 2\x1b[0m\n";
  const whole = new TextEncoder().encode(output);
  const at = (start, end) => chunk(start, new TextDecoder().decode(whole.subarray(start, end)));
  const arrivals = [at(0, 11), at(0, 7), at(7, 18), at(11, 23), at(18, 23), at(23, 23), at(23, whole.length)];
  let shown = 0;
  let text = "";
  for (const arrival of arrivals) {
    const news = chunkNews(shown, arrival);
    assert.notEqual(news, null);
    text += news.text;
    shown = news.shown;
  }
  assert.equal(text, output);
  assert.equal(shown, whole.length);
});

const plain = () => ({ fg: null, bold: false });

test("text without sequences is one segment in the stream's colour", () => {
  assert.deepEqual(ansiSegments("hello", plain()), [{ text: "hello", fg: null, bold: false }]);
  assert.deepEqual(ansiSegments("", plain()), []);
});

test("a colour applies from its sequence to a reset, and the sequences are taken out", () => {
  assert.deepEqual(ansiSegments("a\x1b[31mred\x1b[0m plain", plain()), [
    { text: "a", fg: null, bold: false },
    { text: "red", fg: 1, bold: false },
    { text: " plain", fg: null, bold: false },
  ]);
});

test("a colour set in one chunk carries into the next", () => {
  const state = plain();
  assert.deepEqual(ansiSegments("\x1b[1;32mgo", state), [{ text: "go", fg: 2, bold: true }]);
  assert.deepEqual(state, { fg: 2, bold: true });
  assert.deepEqual(ansiSegments("on", state), [{ text: "on", fg: 2, bold: true }]);
});

test("bright colours show as their plain ones, and 39 resets the colour but not bold", () => {
  const state = plain();
  assert.deepEqual(ansiSegments("\x1b[1m\x1b[94mx\x1b[39my", state), [
    { text: "x", fg: 4, bold: true },
    { text: "y", fg: null, bold: true },
  ]);
});

test("an empty sequence resets, as 0 does", () => {
  const state = { fg: 3, bold: true };
  assert.deepEqual(ansiSegments("\x1b[mz", state), [{ text: "z", fg: null, bold: false }]);
});

test("codes it does not draw are taken out and change nothing", () => {
  const state = { fg: 5, bold: false };
  assert.deepEqual(ansiSegments("\x1b[4mu\x1b[48;5;1mv\x1b[48;2;0;0;30mw", state), [
    { text: "u", fg: 5, bold: false },
    { text: "v", fg: 5, bold: false },  // a background's colour is not bold, nor a reset
    { text: "w", fg: 5, bold: false },
  ]);
});

test("256-colour and RGB foregrounds show as the nearest of the eight, their numbers read as colours", () => {
  // IPython's traceback, its code coloured by pygments: a keyword, an exception's name, a string, an operator.
  const line = "\x1b[38;5;28;01mraise\x1b[39;00m \x1b[38;5;167;01mValueError\x1b[39;00m(\x1b[38;5;124m'no'\x1b[39m)"
    + " \x1b[38;5;241m=\x1b[39m";
  assert.deepEqual(ansiSegments(line, plain()), [
    { text: "raise", fg: 2, bold: true },
    { text: " ", fg: null, bold: false },
    { text: "ValueError", fg: 1, bold: true },
    { text: "(", fg: null, bold: false },
    { text: "'no'", fg: 1, bold: false },
    { text: ") ", fg: null, bold: false },
    { text: "=", fg: 0, bold: false },  // a dark grey
  ]);
  const state = plain();
  ansiSegments("\x1b[38;5;0m", state);  // palette black: not a reset
  assert.deepEqual(state, { fg: 0, bold: false });
  ansiSegments("\x1b[38;5;12m\x1b[1m", state);  // bright blue, then bold
  assert.deepEqual(state, { fg: 4, bold: true });
  ansiSegments("\x1b[38;5;33m\x1b[22m", state);  // 33 is a blue of the cube, not yellow; 22 ends bold
  assert.deepEqual(state, { fg: 4, bold: false });
  ansiSegments("\x1b[38;2;0;160;80m", state);
  assert.deepEqual(state, { fg: 2, bold: false });
  ansiSegments("\x1b[38;5;253m", state);  // a light grey
  assert.deepEqual(state, { fg: 7, bold: false });
});

test("other control sequences are taken out too, never shown", () => {
  assert.deepEqual(ansiSegments("a\x1b[Kb\x1b[?25lc\x1b[2J", plain()), [
    { text: "a", fg: null, bold: false },
    { text: "b", fg: null, bold: false },
    { text: "c", fg: null, bold: false },
  ]);
});

// A batcher whose frames the test runs by hand: `frames` holds the callbacks asked for.
function batcher() {
  const drawn = [];
  const frames = [];
  const live = new LiveBatcher((stream, text) => drawn.push([stream, text]), (callback) => frames.push(callback));
  return { live, drawn, frames };
}

test("the chunks of one frame are drawn once per stream, in order", () => {
  const { live, drawn, frames } = batcher();
  for (const line of ["a\n", "b\n", "c\n"]) live.add("stdout", line);
  live.add("stderr", "oops\n");
  live.add("stdout", "d\n");
  assert.equal(frames.length, 1);  // one frame asked for, however many chunks
  assert.deepEqual(drawn, []);
  assert.equal(live.waiting, 13);
  frames[0]();
  assert.deepEqual(drawn, [["stdout", "a\nb\nc\nd\n"], ["stderr", "oops\n"]]);
  assert.equal(live.waiting, 0);
});

test("after a frame is drawn the next chunk asks for another", () => {
  const { live, drawn, frames } = batcher();
  live.add("stdout", "1");
  frames[0]();
  live.add("stdout", "2");
  assert.equal(frames.length, 2);
  frames[1]();
  assert.deepEqual(drawn, [["stdout", "1"], ["stdout", "2"]]);
});

test("drain draws at once, and the frame asked for before it draws nothing twice", () => {
  const { live, drawn, frames } = batcher();
  live.add("stdout", "socket ");
  live.drain();  // the view reads the stored log next: what the socket brought goes first
  assert.deepEqual(drawn, [["stdout", "socket "]]);
  frames[0]();
  assert.deepEqual(drawn, [["stdout", "socket "]]);
});

test("clear drops what waits, and its frame draws nothing", () => {
  const { live, drawn, frames } = batcher();
  live.add("stdout", "the old run's");
  live.clear();
  live.add("stdout", "the new run's");
  assert.equal(frames.length, 2);
  frames[0]();  // the old run's frame: nothing of either run
  assert.deepEqual(drawn, []);
  frames[1]();
  assert.deepEqual(drawn, [["stdout", "the new run's"]]);
});

test("empty text asks for no frame", () => {
  const { live, frames } = batcher();
  live.add("stdout", "");
  assert.equal(frames.length, 0);
  assert.equal(live.waiting, 0);
});
