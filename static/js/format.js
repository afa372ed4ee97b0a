// Figures as the pages word them: bytes, seconds, scores, points and moments in human units, a
// finished run's figures, an egress policy as text and back, a date field's value as the API's ISO
// text and back. No DOM here: node's tests (tests/js) import it.

// Unknown is not zero: a figure nobody measured comes as null (or is absent) and reads "unknown".
export function known(value) { return value !== null && value !== undefined; }

const BYTE_UNITS = ["KiB", "MiB", "GiB", "TiB"];

export function formatBytes(bytes) {
  if (!known(bytes)) return "unknown";
  if (bytes < 1024) return `${bytes} B`;
  let value = bytes / 1024;
  let unit = 0;
  // Compared as shown: 1048575 bytes is "1.0 MiB", not "1024.0 KiB".
  while (Number(value.toFixed(1)) >= 1024 && unit < BYTE_UNITS.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(1)} ${BYTE_UNITS[unit]}`;
}

// Minutes and whole seconds from a time in seconds, rounded first: 119.6 s is 2:00, not 1:60.
function minutesAndSeconds(seconds) {
  const whole = Math.round(seconds);
  return [Math.floor(whole / 60), whole % 60];
}

export function formatSeconds(seconds) {
  if (!known(seconds)) return "unknown";
  // Compared as shown: 59.999 s would read "60.00 s".
  if (Number(seconds.toFixed(2)) < 60) return `${seconds.toFixed(2)} s`;
  const [minutes, rest] = minutesAndSeconds(seconds);
  return `${minutes} min ${rest} s`;
}

// Seconds on a chart's axis, in the unit that reads best for an axis spanning `span` seconds
// (milliseconds, seconds, or minutes:seconds); an unknown value is a dash.
export function formatAxisSeconds(seconds, span) {
  if (!known(seconds)) return "–";
  if (span < 2) return `${+(seconds * 1000).toFixed(1)} ms`;
  if (span < 120) return `${+seconds.toFixed(2)} s`;
  const [minutes, rest] = minutesAndSeconds(seconds);
  return `${minutes}:${String(rest).padStart(2, "0")}`;
}

const AXIS_BYTE_UNITS = [["GiB", 1024 ** 3], ["MiB", 1024 ** 2], ["KiB", 1024], ["B", 1]];

// The unit a memory axis reads in, [name, size in bytes]: the largest of which its top holds at
// least two.
export function axisByteUnit(top) {
  return AXIS_BYTE_UNITS.find(([, size]) => top >= 2 * size) || AXIS_BYTE_UNITS[AXIS_BYTE_UNITS.length - 1];
}

// A moment from the API (ISO text) in the reader's time zone; null is "none".
export function formatWhen(iso) {
  if (!iso) return "none";
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

// A number of points with at most two decimals, as a score shows it.
function twoDecimals(value) { return String(+Number(value).toFixed(2)); }

// A score out of its maximum, "1.5/2"; unknown (not graded yet) is a dash.
export function formatScore(score, max) {
  return `${known(score) ? twoDecimals(score) : "–"}/${known(max) ? twoDecimals(max) : "–"}`;
}

// What a test is worth: "1 point", "2.5 points".
export function points(value) {
  const number = twoDecimals(value);
  return `${number} point${number === "1" ? "" : "s"}`;
}

// A finished run's figures. `peak_memory_bytes` is the program's own memory (what the memory
// limit bounds); `peak_file_bytes` what its scratch and output files held, shown apart (absent
// from records made before it was measured).
export function describe(run) {
  const figures = [];
  if (known(run.wall_s)) figures.push(`wall ${formatSeconds(run.wall_s)}`);
  figures.push(`CPU ${formatSeconds(run.cpu_s)}`);
  figures.push(`memory ${formatBytes(run.peak_memory_bytes)}`);
  if (run.peak_file_bytes !== undefined) figures.push(`files ${formatBytes(run.peak_file_bytes)}`);
  figures.push(`stdout ${formatBytes(run.stdout_bytes)}${run.stdout_truncated ? " (truncated)" : ""}`);
  figures.push(`stderr ${formatBytes(run.stderr_bytes)}${run.stderr_truncated ? " (truncated)" : ""}`);
  return figures.join(" · ");
}

// Where a finished run's time went (the run detail's `timings`); boot only for a microVM.
export function describeTimings(timings) {
  if (!timings) return "";
  const parts = [];
  for (const [name, label] of [["start_s", "start"], ["boot_s", "boot"], ["total_s", "total"]]) {
    if (known(timings[name])) parts.push(`${label} ${formatSeconds(timings[name])}`);
  }
  return parts.join(" · ");
}

// An egress policy as typed in a text box, one destination a line (spaces or commas also
// separate them), as the API takes it: ["api.example.org:443", "*.example.org:443"]; and back.
export function egressRules(text) { return text.split(/[\s,]+/).filter(Boolean); }
export function egressText(rules) { return (rules || []).join("\n"); }
// A ceiling in words: "api.example.org:443, *.pypi.org:443", or "nothing" when it is empty.
export function egressWords(rules) { return rules && rules.length ? rules.join(", ") : "nothing"; }

// --- dates in datetime-local fields: the browser's local time; the API takes ISO with an offset

const pad = (n) => String(n).padStart(2, "0");

// A Date's local wall-clock time as "YYYY-MM-DDTHH:MM" (what a datetime-local field holds).
function localMinutes(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function toLocalInput(iso) {
  return iso ? localMinutes(new Date(iso)) : "";
}

export function fromLocalInput(value) {
  if (!value) return null;
  const d = new Date(value);  // a date-time without an offset is read as local time
  const offset = -d.getTimezoneOffset();  // at that date: summer and winter time differ
  const sign = offset >= 0 ? "+" : "-";
  return `${localMinutes(d)}:00${sign}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
}
