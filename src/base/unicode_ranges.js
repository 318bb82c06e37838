// unicode_ranges.js — the one loop the table generators share (gen_unicode_tables.js, and
// src/tokenizer/gen_*_tables.js): for each [name, regex] of CLASSES, the code points its test
// (for a regex, node's engine: V8 + ICU) matches, as a static C array of [lo, hi] ranges
// name_ranges[][2] and the tsr_uc_class PREFIX_name that holds it and its count (unicode_tables.h),
// pushed onto the lines OUT (an empty class: one {0, 0}, count 0);
// and nodeVersion, the node that writes them, as the tables name it (tsr_uc_version).
'use strict';
function rangesOf(re) {
  const ranges = [];
  let lo = -1;
  for (let cp = 0; cp <= 0x110000; cp++) {
    const isIn = cp < 0x110000 && !(cp >= 0xd800 && cp <= 0xdfff) && re.test(String.fromCodePoint(cp));
    if (isIn && lo < 0) lo = cp;
    if (!isIn && lo >= 0) { ranges.push([lo, cp - 1]); lo = -1; }
  }
  return ranges;
}
function pushTables(out, prefix, classes) {
  for (const [name, re] of classes) {
    const ranges = rangesOf(re);
    out.push(`static const uint32_t ${name}_ranges[][2] = {`);
    let line = '   ';
    for (const [a, b] of ranges) {
      const item = ` {0x${a.toString(16)}, 0x${b.toString(16)}},`;
      if (line.length + item.length > 99) { out.push(line); line = '   '; }
      line += item;
    }
    if (line.trim()) out.push(line);
    if (!ranges.length) out.push('    {0, 0}, /* none: an array needs an element */');
    out.push('};');
    out.push(`const tsr_uc_class ${prefix}_${name} = {${name}_ranges, ${ranges.length}};`, '');
  }
}
const nodeVersion = `Unicode ${process.versions.unicode} (node ${process.version}, ICU ${process.versions.icu})`;
module.exports = { pushTables, nodeVersion };
