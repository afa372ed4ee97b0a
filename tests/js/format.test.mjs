// static/js/format.js: figures in human units, a run's figures, egress policies as text, and a
// date field's local time as ISO text with its offset.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  axisByteUnit, describe, describeTimings, egressRules, egressText, egressWords, formatAxisSeconds, formatBytes,
  formatScore, formatSeconds, formatWhen, fromLocalInput, points, toLocalInput,
} from "../../static/js/format.js";

const KiB = 1024;
const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

test("bytes under a KiB are counted whole and unknown is not zero", () => {
  assert.equal(formatBytes(0), "0 B");
  assert.equal(formatBytes(1023), "1023 B");
  assert.equal(formatBytes(null), "unknown");
  assert.equal(formatBytes(undefined), "unknown");
});

test("bytes from a KiB up take the largest unit with one decimal", () => {
  assert.equal(formatBytes(KiB), "1.0 KiB");
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(5 * MiB + 100 * KiB), "5.1 MiB");
  assert.equal(formatBytes(3 * GiB), "3.0 GiB");
  assert.equal(formatBytes(3 * 1024 ** 5), "3072.0 TiB");  // no unit above TiB
});

test("bytes just under the next unit read as that unit, never as 1024.0 of the smaller", () => {
  assert.equal(formatBytes(MiB - 1), "1.0 MiB");
  assert.equal(formatBytes(GiB - 1), "1.0 GiB");
  assert.equal(formatBytes(MiB - 60), "1023.9 KiB");
});

test("seconds under a minute have two decimals, a minute or more whole minutes and seconds", () => {
  assert.equal(formatSeconds(0), "0.00 s");
  assert.equal(formatSeconds(0.004), "0.00 s");
  assert.equal(formatSeconds(59.994), "59.99 s");
  assert.equal(formatSeconds(61.4), "1 min 1 s");
  assert.equal(formatSeconds(3600), "60 min 0 s");
  assert.equal(formatSeconds(null), "unknown");
});

test("seconds that round up to the next minute carry into it", () => {
  assert.equal(formatSeconds(59.996), "1 min 0 s");  // not "60.00 s"
  assert.equal(formatSeconds(119.6), "2 min 0 s");  // not "1 min 60 s"
});

test("an axis's seconds read in milliseconds, seconds or minutes as its span needs", () => {
  assert.equal(formatAxisSeconds(0.0015, 1), "1.5 ms");
  assert.equal(formatAxisSeconds(0.05, 0), "50 ms");
  assert.equal(formatAxisSeconds(1.5, 2), "1.5 s");  // a span of 2 s is in seconds
  assert.equal(formatAxisSeconds(3.14159, 119), "3.14 s");
  assert.equal(formatAxisSeconds(65, 120), "1:05");
  assert.equal(formatAxisSeconds(119.6, 600), "2:00");  // not "1:60"
  assert.equal(formatAxisSeconds(null, 10), "–");
});

test("a memory axis reads in the largest unit its top holds two of", () => {
  assert.deepEqual(axisByteUnit(0), ["B", 1]);
  assert.deepEqual(axisByteUnit(2 * KiB - 1), ["B", 1]);
  assert.deepEqual(axisByteUnit(2 * KiB), ["KiB", KiB]);
  assert.deepEqual(axisByteUnit(512 * MiB), ["MiB", MiB]);
  assert.deepEqual(axisByteUnit(2 * GiB), ["GiB", GiB]);
});

test("a score shows at most two decimals, and a dash for what is not known yet", () => {
  assert.equal(formatScore(1.5, 2), "1.5/2");
  assert.equal(formatScore(1 / 3, 1), "0.33/1");
  assert.equal(formatScore("2.50", "3"), "2.5/3");
  assert.equal(formatScore(0, 0), "0/0");  // zero is a score
  assert.equal(formatScore(null, 2), "–/2");
  assert.equal(formatScore(undefined, null), "–/–");
});

test("one point is singular, as is what rounds to one", () => {
  assert.equal(points(1), "1 point");
  assert.equal(points(1.004), "1 point");
  assert.equal(points(0), "0 points");
  assert.equal(points("2.5"), "2.5 points");
});

test("a finished run's figures come in a fixed order, unknown ones said so", () => {
  const run = { wall_s: 1.5, cpu_s: 0.25, peak_memory_bytes: 10 * MiB, peak_file_bytes: 2048, stdout_bytes: 12,
    stderr_bytes: 0, stdout_truncated: false, stderr_truncated: true };
  assert.equal(describe(run),
    "wall 1.50 s · CPU 0.25 s · memory 10.0 MiB · files 2.0 KiB · stdout 12 B · stderr 0 B (truncated)");
  const vm = { wall_s: null, cpu_s: null, peak_memory_bytes: null, peak_file_bytes: null, stdout_bytes: 0,
    stderr_bytes: 0 };
  assert.equal(describe(vm), "CPU unknown · memory unknown · files unknown · stdout 0 B · stderr 0 B");
});

test("a record from before file sizes were measured has no files figure", () => {
  const old = { wall_s: 70, cpu_s: 1, peak_memory_bytes: 1, stdout_bytes: 1, stderr_bytes: 1 };
  assert.equal(describe(old), "wall 1 min 10 s · CPU 1.00 s · memory 1 B · stdout 1 B · stderr 1 B");
});

test("a run's timings list only what was measured, boot between start and total", () => {
  assert.equal(describeTimings(null), "");
  assert.equal(describeTimings({ total_s: 2, start_s: 0.5 }), "start 0.50 s · total 2.00 s");
  assert.equal(describeTimings({ total_s: 2, boot_s: 0.25, start_s: 0.5 }), "start 0.50 s · boot 0.25 s · total 2.00 s");
  assert.equal(describeTimings({ start_s: null }), "");
});

test("an egress policy is split on lines, spaces and commas, with nothing empty kept", () => {
  assert.deepEqual(egressRules("api.example.org:443, *.example.org:443\n\n  pypi.org:443 \n"),
    ["api.example.org:443", "*.example.org:443", "pypi.org:443"]);
  assert.deepEqual(egressRules(""), []);
  assert.deepEqual(egressRules(" ,\n, "), []);
});

test("an egress policy goes back to one destination a line, and an empty one reads nothing", () => {
  const rules = ["a.example:443", "*.b.example:80"];
  assert.equal(egressText(rules), "a.example:443\n*.b.example:80");
  assert.deepEqual(egressRules(egressText(rules)), rules);
  assert.equal(egressText(null), "");
  assert.equal(egressWords(rules), "a.example:443, *.b.example:80");
  assert.equal(egressWords([]), "nothing");
  assert.equal(egressWords(null), "nothing");
});

test("no moment reads none", () => {
  assert.equal(formatWhen(null), "none");
  assert.equal(formatWhen(""), "none");
});

// The process's time zone for the length of `body` (node reads TZ again when it is set).
function inZone(zone, body) {
  const before = process.env.TZ;
  process.env.TZ = zone;
  try { body(); } finally {
    if (before === undefined) delete process.env.TZ; else process.env.TZ = before;
  }
}

test("a date field's local time gets the offset of its own date, summer or winter", () => {
  inZone("Europe/Berlin", () => {
    assert.equal(fromLocalInput("2026-07-01T12:00"), "2026-07-01T12:00:00+02:00");
    assert.equal(fromLocalInput("2026-01-15T12:00"), "2026-01-15T12:00:00+01:00");
  });
});

test("an offset of hours and minutes, east or west, is written with its sign", () => {
  inZone("Asia/Kolkata", () => assert.equal(fromLocalInput("2026-03-01T09:05"), "2026-03-01T09:05:00+05:30"));
  inZone("America/St_Johns", () => {
    assert.equal(fromLocalInput("2026-01-10T23:59"), "2026-01-10T23:59:00-03:30");
    assert.equal(fromLocalInput("2026-07-10T00:00"), "2026-07-10T00:00:00-02:30");
  });
  inZone("UTC", () => assert.equal(fromLocalInput("2026-07-10T00:00"), "2026-07-10T00:00:00+00:00"));
});

test("an empty date field is no date, and no date an empty field", () => {
  assert.equal(fromLocalInput(""), null);
  assert.equal(toLocalInput(null), "");
});

test("a moment from the API fills a date field in local time, and comes back as the same moment", () => {
  inZone("Europe/Berlin", () => {
    const iso = "2026-12-31T23:30:00Z";
    assert.equal(toLocalInput(iso), "2027-01-01T00:30");  // the next day, and year, in Berlin
    assert.equal(Date.parse(fromLocalInput(toLocalInput(iso))), Date.parse(iso));
  });
});
