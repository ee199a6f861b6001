"""JavaScript, sealed (`script.py` has the layout): the program stage runs the completion and
the tests' `candidate(...)` calls inside the tests' own `function test()`, and writes each value
as one JSON line of a tagged tree; the judge runs MultiPL-E's tests unchanged (legacy
`assert.deepEqual`) with the prompt's function returning those values rebuilt.

The encoding carries what `assert.deepEqual` (loose mode) tells apart in the values MultiPL-E
compares (arrays, plain objects, numbers, strings, booleans, null, undefined): numbers as their
exact text (-0, NaN and the infinities too) and bigints, arrays with their holes, objects as
their own enumerable string keys in order (loose mode ignores prototypes and symbol keys, so a
class instance crosses as a plain object). A value it cannot carry (a function, symbol, Map,
Set, Date, boxed primitive, an array with extra properties, a cyclic or huge structure) crosses
as a marker that makes the stub throw: against MultiPL-E's expected values deepEqual fails each
of them too (other type tags, or a primitive against an object), but for one absurd case: loose
`==` makes a function equal the string of its own source text, which the reference would pass."""

from __future__ import annotations

import re

from easylemur.eval.benchmarks.multipl_e.seals import scan, script

SYNTAX = scan.Syntax(quotes="\"'`")

ENCODER = r"""const __easylemur_seal = (() => {
  // easylemur's driver: one JSON line per call, a tree of tags the judge rebuilds (seals/js.py).
  const fs = require("fs");
  const out = fs.openSync("values", "w");  // opened before any call: a chdir of the function's moves nothing
  const tagOf = (v) => Object.prototype.toString.call(v);
  const INDEX = /^(0|[1-9][0-9]*)$/;
  class Uncarried extends Error {}
  const lines = [];
  let budget = 0;
  function enc(v, depth) {
    if (++budget > 1000000 || depth > 1000) throw new Uncarried("a structure too large or too deep (cyclic?)");
    switch (typeof v) {
      case "undefined": return ["u"];
      case "boolean": case "string": return v;
      case "number": return ["n", Object.is(v, -0) ? "-0" : String(v)];
      case "bigint": return ["b", String(v)];
      case "object": {
        if (v === null) return null;
        const tag = tagOf(v);
        if (Array.isArray(v) && tag === "[object Array]") {
          if (v.length > 1048576) throw new Uncarried("an array too long");
          if (Object.keys(v).some((k) => !INDEX.test(k) || Number(k) >= v.length)) {
            throw new Uncarried("an array with properties beside its elements");
          }
          const items = [];
          for (let i = 0; i < v.length; i++) {
            items.push(Object.prototype.hasOwnProperty.call(v, i) ? enc(v[i], depth + 1) : ["h"]);
          }
          return ["a", items];
        }
        if (tag === "[object Object]") return ["o", Object.keys(v).map((k) => [k, enc(v[k], depth + 1)])];
        throw new Uncarried("a " + tag.slice(8, -1));
      }
      default: throw new Uncarried("a " + typeof v);
    }
  }
  return {
    record(v) {
      budget = 0;
      try {
        lines.push(JSON.stringify(enc(v, 0)));
      } catch (e) {
        if (!(e instanceof Uncarried)) throw e;
        lines.push(JSON.stringify(["!", e.message]));
      }
    },
    flush() { fs.writeSync(out, lines.join("\n") + "\n"); },
  };
})();
"""

DECODER = r"""const __easylemur_next = (() => {
  // easylemur's judge: the program's values, parsed (JSON.parse, never evaluated) and rebuilt.
  const fs = require("fs");
  const CALLS = @CALLS@;
  const NUMBER = /^(-?([0-9]+(\.[0-9]+)?(e[+-][0-9]+)?|Infinity)|NaN)$/;
  let lines = null, next = 0;
  const bad = (why) => new Error("easylemur: the program's values cannot be used: " + why);
  function dec(x, depth) {
    if (depth > 10000) throw bad("nested too deeply");
    if (x === null || typeof x === "boolean" || typeof x === "string") return x;
    if (!Array.isArray(x)) throw bad("an untagged value");
    const [t, a] = x;
    if (t === "u" && x.length === 1) return undefined;
    if (t === "n" && x.length === 2 && typeof a === "string" && NUMBER.test(a)) return Number(a);
    if (t === "b" && x.length === 2 && typeof a === "string" && /^-?[0-9]+$/.test(a)) return BigInt(a);
    if (t === "a" && x.length === 2 && Array.isArray(a)) {
      const out = new Array(a.length);
      a.forEach((item, i) => {
        if (!(Array.isArray(item) && item.length === 1 && item[0] === "h")) out[i] = dec(item, depth + 1);
      });
      return out;
    }
    if (t === "o" && x.length === 2 && Array.isArray(a)) {
      const out = {};
      for (const pair of a) {
        if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string") throw bad("a malformed object");
        Object.defineProperty(out, pair[0], {value: dec(pair[1], depth + 1), enumerable: true, writable: true,
                                             configurable: true});
      }
      return out;
    }
    if (t === "!" && x.length === 2 && typeof a === "string") {
      throw new Error("easylemur: the function returned a value its tests cannot be given: " + a);
    }
    throw bad("an unknown tag");
  }
  return function () {
    if (lines === null) {
      lines = fs.readFileSync("values", "utf8").split("\n");
      if (lines.pop() !== "" || lines.length !== CALLS) throw bad(lines.length + " lines for " + CALLS + " calls");
    }
    if (next >= CALLS) throw bad("more calls than values");
    return dec(JSON.parse(lines[next++]), 0);
  };
})();
"""

SEAL = script.ScriptSeal(
    comparison=re.compile(r"[ \t]*assert\.deepEqual\("),
    find=lambda tests, where: scan.calls(tests, ("candidate",), SYNTAX, where),
    record="__easylemur_seal.record(@CALL@);", encoder=ENCODER, flush="__easylemur_seal.flush();\n",
    decoder=DECODER, stub="  return __easylemur_next();\n}\n")

program = SEAL.program  # languages.build_program's entry point
