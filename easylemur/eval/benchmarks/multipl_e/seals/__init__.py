"""MultiPL-E's tests judged outside the candidate's reach, one module per language (named for
MultiPL-E's language code). Each has `program(lang, prompt, completion, tests, where) -> Program`:
the candidate's code runs with a driver that makes the tests' calls and writes the values they
return as data; the tests themselves run in the Program's trusted `Judge`, with the function
under test replaced by a stub that reads those values (`scan.py` finds the calls)."""
