"""MINT's solution checks, rule for rule (its `mint/tasks/*.py`, reimplemented here): a proposal
passes or not exactly where MINT's would, quirks included, so a run can be set beside MINT's
published numbers.

- code (M-HumanEval, M-MBPP): the proposed code, then the task's tests, in one program
  (MINT: `exec(solution + "\n" + tests)`, 10 s); here the code runs in the sandbox's candidate
  process and the tests in its checker, the candidate's results crossing the pipe as data, so
  a proposal can fail the tests but never forge a pass.
- `rules`: "pinned" (MINT's checks at the pinned commit, the default) or "paper" (as they were
  when the transcripts the Lemur paper quotes were scored, 2023-09: before MINT's 3f7f12c, a
  negative reference's 5% tolerance was negative, so no answer matched it; before its cc4fbc1,
  a TheoremQA option answer "(a)" did not match the reference "a"). MINT re-scored some
  models' files after cc4fbc1 (Llama-2-70B-Chat's), not Lemur-70B-Chat's.
- reasoning (M-GSM8K, M-MATH, M-HotpotQA): the lowercased, stripped answer against the
  lowercased reference: as numbers within 5% of the reference where both read as floats,
  else the reference must occur in the answer.
- multiple choice (M-MMLU): the answer is the letter when "a)" or "a )" occurs in it (MINT's
  loop looks at "a" only), else the whole lowercased answer; then the reference letter in it,
  else the options' texts (a wrong option's text in it fails, the right one's passes).
- TheoremQA: TheoremQA's own answer normalisation, then `eval` of the result (MINT evaluates
  the model's text in its own module): that runs in the sandbox, and only the value comes back,
  compared on the checker's side (numbers within 4%, an integer rounded, lists sorted, booleans
  and options exactly).
"""

from __future__ import annotations

from typing import Any, Union

from easylemur.eval.sandbox import Job

CODE_TIMEOUT_S = 10.0  # MINT's check_correctness timeout
THEOREMQA_LIBS = ("numpy", "sympy", "mpmath")


# ------------------------------------------------------------------ reasoning (host)

def _close_or_contained(reference: str, answer: str, rules: str = "pinned") -> bool:
    try:
        float(reference)
        float(answer)
        # the paper's rules: before MINT's 3f7f12c a negative reference had a negative tolerance
        tolerance = 0.05 * (float(reference) if rules == "paper" else abs(float(reference)))
        return abs(float(reference) - float(answer)) <= tolerance
    except ValueError:
        return reference in answer


def reasoning(reference: str, solution: str, rules: str = "pinned") -> bool:
    return _close_or_contained(reference, solution.lower().strip(), rules)


# ------------------------------------------------------------------ multiple choice (host)

def options(prompt: str) -> dict[str, str]:
    """{letter: text} of the options after "Options: " (" , " between them, "A ) text")."""
    found = {}
    for part in prompt.split("Options: ")[-1].split(" , "):
        pieces = part.strip("[]' ").split(")")
        text = pieces[1].lower().strip(".").replace(". Which option is correct?", "")
        found[pieces[0].lower().strip()] = text.replace(". Which one is correct?", "").strip()
    return found


def _mc_compare(reference: str, answer: str) -> bool:
    if reference.isdigit() and answer.isdigit():
        return abs(float(reference) - float(answer)) <= 0.05 * float(reference)
    return reference in answer


def multiple_choice(reference: str, opts: dict[str, str], solution: str) -> bool:
    """Raises KeyError where MINT's check does (a reference that is not an option's letter)."""
    answer = solution.lower().strip()
    if "a)" in answer or "a )" in answer:
        answer = "a"
    if _mc_compare(reference, answer):
        return True
    correct = opts[reference]
    wrong = list(opts.values())
    for text in wrong:  # MINT removes while iterating: an item after a removed one is not looked at
        if text in correct:
            wrong.remove(text)
    if any(_mc_compare(text, answer) or text in answer for text in wrong):
        return False
    return _mc_compare(correct, answer) or correct in answer


# ------------------------------------------------------------------ TheoremQA (sandbox)

# Runs as the candidate: TheoremQA's normalisation, then eval in a namespace like MINT's module
# (numpy as np, sympy's Rational; no math); its value is what the checker compares.
_PARSE = r'''
import re
import numpy as np
from sympy import Rational

def _normalise(p):
    if "=" in p: p = p.split("=")[-1].strip()
    if "≈" in p: p = p.split("≈")[-1].strip()
    for ch in ("`", "$", "°"): p = p.replace(ch, "")
    if p in ["true", "yes", "false", "no"]:
        p = "True" if p in ("true", "yes") else "False"
    if "True" in p or "False" in p:
        p = "True" if "True" in p else "False"
    if "approximately" in p: p = p.replace("approximately", "").strip()
    if " or " in p: p = p.split(" or ")[0]
    num = r"[-+]?(?:[\d,]*\.*\d+)"
    if re.match(num + r" [^0-9 ]+$", p): p = re.search("(" + num + r") [^0-9 ]+$", p).group(1)
    if re.match(r"[^0-9 ]+ " + num + "$", p): p = re.search(r"[^0-9 ]+ (" + num + ")$", p).group(1)
    if re.match(num + r"[^\d]{1,2}$", p): p = re.search("(" + num + r")[^\d]{1,2}$", p).group(1)
    if re.match(r"[^-+\d]{1,2}(?:[\d,]*\.*\d+)$", p): p = re.search(r"[^-+\d]{1,2}((?:[\d,]*\.*\d+))$", p).group(1)
    if "10^" in p: p = re.sub(r"10\^(-?\d+)", r"math.pow(10, \1)", p)
    p = p.replace(" x ", "*").replace(" × ", "*")
    if re.match(r"^[-+]?(\d{1,3}(,\d{3})*|(\d+))(\.\d+)?$", p): p = p.replace(",", "")
    for letter in "abcd":
        if letter + ")" in p or letter + " )" in p or LETTER_CASE(p).strip() == letter:
            p = "(" + letter + ")"
    if "(a)" in p or "(b)" in p or "(c)" in p or "(d)" in p:
        p = '"' + re.search(r"\([a-d]\)", p).group(0) + '"'
    return p or "0"

def _value(text):
    try:
        v = eval(_normalise(text), {"np": np, "Rational": Rational, "re": re})
    except Exception:
        return None
    if isinstance(v, (set, tuple)):
        v = list(v)
        if v and isinstance(v[0], complex): v = [x.real for x in v]
        elif v and isinstance(v[0], Rational): v = [float(x) for x in v]
    elif isinstance(v, np.ndarray):
        v = v.tolist()
    elif isinstance(v, complex):
        v = v.real
    elif isinstance(v, Rational):
        v = float(v)
    return v

prediction = _value(SOLUTION)
'''

# Runs as the checker's tests: `prediction` is the candidate's value, rebuilt as plain data.
_COMPARE = r'''
def _number(p, gt):
    if isinstance(p, (int, float)):
        pass
    else:
        return False
    if isinstance(gt, float):
        return gt - abs(gt) * 0.04 <= p <= gt + abs(gt) * 0.04
    return round(p) == gt

def _numbers(p, gt):
    if not isinstance(p, list) or len(p) != len(gt) or any(not isinstance(x, (int, float)) for x in p):
        return False
    return all(_number(a, b) for a, b in zip(sorted(p), sorted(gt)))

ok = False
if isinstance(prediction, (str, int, float, list)):
    if ANSWER_TYPE in ["bool", "option", "Option"]:
        ok = (prediction == "(" + str(GT) + ")" and not PAPER_RULES) or prediction == GT
    elif ANSWER_TYPE in ("integer", "float"):
        ok = _number(prediction, GT)
    elif ANSWER_TYPE in ["list of integer", "list of float"]:
        ok = _numbers(prediction, GT)
    else:
        raise TypeError("answer type " + repr(ANSWER_TYPE))
assert ok
'''


def theoremqa(reference: Any, answer_type: str, solution: str, rules: str = "pinned") -> Job:
    """The check as a sandbox Job: the proposal's value computed on the candidate's side, compared
    on the checker's. The paper's rules (before MINT's cc4fbc1): an option letter is matched as
    written (not lowercased) and compared with the bare reference letter only."""
    paper = rules == "paper"
    # the data's values go in last, so no text of theirs is taken for a placeholder
    return Job(code=_PARSE.replace("LETTER_CASE", "str" if paper else "str.lower").replace("SOLUTION", repr(solution)),
               tests=_COMPARE.replace("PAPER_RULES", repr(paper)).replace("ANSWER_TYPE", repr(answer_type))
               .replace("GT", repr(reference)), libs=THEOREMQA_LIBS)


def code(solution: str, tests: str) -> Job:
    return Job(code=solution, tests=tests)


RULES = ("pinned", "paper")  # MINT's checks at the pinned commit, or as they were when the paper's transcripts were scored


def judge(kind: str, problem: Any, solution: str, rules: str = "pinned") -> Union[bool, Job]:
    """A proposal's check: decided here (a bool) or a Job for the sandbox."""
    if kind == "code":
        return code(solution, problem.reference)
    if kind == "reasoning":
        return reasoning(problem.reference, solution, rules)
    if kind == "multiple_choice":
        return multiple_choice(problem.reference, problem.options, solution)
    if kind == "theoremqa":
        return theoremqa(problem.reference, problem.answer_type, solution, rules)
    raise ValueError(f"check kind {kind!r}")

