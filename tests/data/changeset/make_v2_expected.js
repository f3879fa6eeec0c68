// Writes v2-expected.json: the plan digest and change-set digest (version 2)
// of the plan in v1-record.json, computed by an independent JCS: JavaScript's
// own JSON.parse and JSON.stringify with sorted keys, which is RFC 8785 for
// this document (ASCII keys; numbers are JavaScript's doubles, as RFC 8785
// writes them).
//
// Run: node make_v2_expected.js > v2-expected.json
const crypto = require("crypto");
const fs = require("fs");

function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v !== null && typeof v === "object") {
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  return JSON.stringify(v);
}
const digest = (v) => "sha256:" + crypto.createHash("sha256").update(canonical(v)).digest("hex");

const record = JSON.parse(fs.readFileSync(__dirname + "/v1-record.json", "utf8"));
const m = record.members[0];
const planDigest = digest({
  denied: [],
  destructive: m.plan.destructive,
  entries: m.plan.entries,
  member: m.member,
  outputs: m.plan.outputs,
});
const setDigest = digest({
  version: 2,
  members: [{ member: m.member, status: m.status, planDigest, unknownInputs: m.unknownInputs, inputs: m.inputs }],
});
console.log(JSON.stringify({ planDigest, setDigest, canonicalPlan: canonical({
  denied: [], destructive: m.plan.destructive, entries: m.plan.entries, member: m.member, outputs: m.plan.outputs,
}) }, null, 2));
