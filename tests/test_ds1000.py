"""DS-1000 judged in the sandbox: small problems written here in the published row format
(prompt, reference_code, code_context with exec_context/test_execution/test_string, metadata),
each with its reference (passes) and a wrong snippet (fails); the sealed program's verdicts
(the candidate's code in the program, the official test program in its Judge) equal those of
the official rule run directly (the test program assembled the same way, exec'd with empty
globals in a subprocess of this venv: pass iff nothing is raised); early exits fail; a problem of
a library the sandbox lacks is skipped and counted; the loader's errors name file and line.
tests/test_ds1000_cheats.py holds the cheats that score 0 and more honest fixtures."""

import concurrent.futures
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from easylemur.eval.benchmarks.ds1000 import (DS1000, MISSING, STOPS, TEST_FAILED, DS1000Problem, breakdown, load_ds1000,
                                   official_program, postprocess, preloads, supported_libraries)
from easylemur.eval.sandbox import Program, Sandbox, run_programs
from easylemur.eval.api import EvalDataError

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
RAISED = TEST_FAILED  # the candidate's exec raised: the official test program fails there

TEST_EXECUTION = '''

def test_execution(solution: str):
    code = exec_context.replace("[insert]", solution)
    for i in range({n}):
        test_input, expected_result = generate_test_case(i + 1)
        test_env = {{"test_input": test_input}}
        exec(code, test_env)
        assert exec_test(test_env["result"], expected_result)
'''
PLT_TEST_EXECUTION = '''

def test_execution(solution: str):
    solution = "\\n".join(filter(skip_plt_cmds, solution.split("\\n")))
    code = exec_context.replace("[insert]", solution)
    for i in range(1):
        test_input, expected_result = generate_test_case(i + 1)
        test_env = {"test_input": test_input}
        exec(code, test_env)
        assert exec_test(test_env["result"], expected_result)
'''
NO_LOOPS = '''

def test_string(solution: str):
    tokens = []
    for token in tokenize.tokenize(io.BytesIO(solution.encode("utf-8")).readline):
        tokens.append(token.string)
    assert "for" not in tokens and "while" not in tokens
'''
BEGIN = "</code>\n{var} = ... # put solution in this variable\nBEGIN SOLUTION\n<code>\n"


def _row(pid, library, lib_pid, prompt, reference, context, cases=1, perturbation="Origin"):
    return {"prompt": prompt, "reference_code": reference, "code_context": context,
            "metadata": {"problem_id": pid, "library_problem_id": lib_pid, "library": library,
                         "test_case_cnt": cases, "perturbation_type": perturbation}}


NUMPY_RESHAPE = _row(0, "Numpy", 0, (
    "Problem:\nHow do I turn a 1-d array into a 2-d array of `ncol` columns, dropping the elements that do not fill a "
    "last row?\nA:\n<code>\nimport numpy as np\nA = np.array([1,2,3,4,5,6,7])\nncol = 2\n" + BEGIN.format(var="B")),
    "B = A[: len(A) // ncol * ncol].reshape(-1, ncol)\n", '''import numpy as np
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            A = np.array([1, 2, 3, 4, 5, 6, 7])
            ncol = 2
        elif test_case_id == 2:
            np.random.seed(42)
            A = np.random.rand(20)
            ncol = 5
        return A, ncol

    def generate_ans(data):
        A, ncol = data
        return A[: len(A) // ncol * ncol].reshape(-1, ncol)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1


exec_context = r"""
import numpy as np
A, ncol = test_input
[insert]
result = B
"""''' + TEST_EXECUTION.format(n=2), cases=2)

NUMPY_NO_LOOPS = _row(1, "Numpy", 1, (
    "Problem:\nI need the sum of each row of a 2-d array, without a Python loop.\nA:\n<code>\nimport numpy as np\n"
    "a = np.arange(6).reshape(2, 3)\n" + BEGIN.format(var="result")),
    "result = a.sum(axis=1)\n", '''import numpy as np
import copy
import tokenize, io


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            a = np.arange(6).reshape(2, 3)
        return a

    def generate_ans(data):
        a = data
        return a.sum(axis=1)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1


exec_context = r"""
import numpy as np
a = test_input
[insert]
"""''' + TEST_EXECUTION.format(n=1) + NO_LOOPS, perturbation="Semantic")

PANDAS_SUM = _row(2, "Pandas", 0, (
    "Problem:\nHow do I add a column 'Sum' holding the sum of the columns named in a list?\nA:\n<code>\n"
    "import pandas as pd\nimport numpy as np\ndf = pd.DataFrame({'a': [1, 2], 'b': [3, 4], 'c': [5, 6]})\n"
    "list_of_my_columns = ['a', 'c']\n" + BEGIN.format(var="df")),
    'df["Sum"] = df[list_of_my_columns].sum(axis=1)\n', '''import pandas as pd
import numpy as np
import copy


def generate_test_case(test_case_id):
    def generate_ans(data):
        df, list_of_my_columns = data
        df["Sum"] = df[list_of_my_columns].sum(axis=1)
        return df

    def define_test_input(test_case_id):
        if test_case_id == 1:
            np.random.seed(10)
            df = pd.DataFrame({c: np.random.randint(1, 100, 10) for c in "ABCDE"})
            list_of_my_columns = ["A", "E"]
        return df, list_of_my_columns

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        pd.testing.assert_frame_equal(result, ans, check_dtype=False)
        return 1
    except:
        return 0


exec_context = r"""
import pandas as pd
import numpy as np
df, list_of_my_columns = test_input
[insert]
result = df
"""''' + TEST_EXECUTION.format(n=1))

PANDAS_FUNCTION = _row(3, "Pandas", 1, (
    "Problem:\nKeep the rows whose 'x' is greater than 1.\nA:\n<code>\nimport pandas as pd\n\n"
    "example_df = pd.DataFrame({'x': [0, 1, 2, 3]})\ndef f(df=example_df):\n    # return the solution in this function\n"
    "    # result = f(df)\n    ### BEGIN SOLUTION"),
    '    result = df[df["x"] > 1]\n\n    return result\n', '''import pandas as pd
import numpy as np
import copy


def generate_test_case(test_case_id):
    def generate_ans(data):
        df = data
        return df[df["x"] > 1]

    def define_test_input(test_case_id):
        if test_case_id == 1:
            df = pd.DataFrame({"x": [0, 1, 2, 3]})
        if test_case_id == 2:
            df = pd.DataFrame({"x": [5, -1, 2], "y": ["a", "b", "c"]})
        return df

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        pd.testing.assert_frame_equal(result, ans, check_dtype=False)
        return 1
    except:
        return 0


exec_context = r"""
import pandas as pd
import numpy as np
def f(df):
[insert]
df = test_input
result = f(df)
"""''' + TEST_EXECUTION.format(n=2), cases=2, perturbation="Surface")

SCIPY_KS = _row(4, "Scipy", 0, (
    "Problem:\nHow do I run a two-sample Kolmogorov-Smirnov test?\nA:\n<code>\nfrom scipy import stats\n"
    "import numpy as np\nnp.random.seed(42)\nx = np.random.normal(0, 1, 100)\ny = np.random.normal(0, 1, 100)\n"
    "</code>\nstatistic, p_value = ... # put solution in these variables\nBEGIN SOLUTION\n<code>\n"),
    "statistic, p_value = stats.ks_2samp(x, y)\n", '''import numpy as np
import copy
from scipy import stats


def generate_test_case(test_case_id):

    def define_test_input(test_case_id):
        if test_case_id == 1:
            np.random.seed(42)
            x = np.random.normal(0, 1, 100)
            y = np.random.normal(0, 1, 100)
        elif test_case_id == 2:
            np.random.seed(42)
            x = np.random.normal(0, 1, 100)
            y = np.random.normal(1.1, 0.9, 100)
        return x, y

    def generate_ans(data):
        _a = data
        x, y = _a
        statistic, p_value = stats.ks_2samp(x, y)
        return [statistic, p_value]

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    np.testing.assert_allclose(result, ans)
    return 1


exec_context = r"""
from scipy import stats
import numpy as np
x, y = test_input
[insert]
result = [statistic, p_value]
"""''' + TEST_EXECUTION.format(n=2), cases=2)

MATPLOTLIB_LEGEND = _row(5, "Matplotlib", 0, (
    "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n\nx = np.arange(10)\ny = np.arange(10)\n\n"
    "# plot y over x with the label \"y\" and show a legend\n# SOLUTION START\n"),
    'plt.plot(x, y, label="y")\nplt.legend()\n', '''import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
from PIL import Image


def skip_plt_cmds(l):
    return all(
        p not in l for p in ["plt.show()", "plt.clf()", "plt.close()", "savefig"]
    )


def generate_test_case(test_case_id):
    x = np.arange(10)
    y = np.arange(10)
    plt.plot(x, y, label="y")
    plt.legend()
    plt.savefig("ans.png", bbox_inches="tight")
    plt.close()
    return None, None


def exec_test(result, ans):
    code_img = np.array(Image.open("output.png"))
    oracle_img = np.array(Image.open("ans.png"))
    sample_image_stat = code_img.shape == oracle_img.shape and np.allclose(
        code_img, oracle_img
    )
    if not sample_image_stat:
        ax = plt.gca()
        leg = ax.get_legend()
        assert leg is not None
        assert [t.get_text() for t in leg.get_texts()] == ["y"]
    return 1


exec_context = r"""
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
x = np.arange(10)
y = np.arange(10)
[insert]
plt.savefig('output.png', bbox_inches ='tight')
result = None
"""''' + PLT_TEST_EXECUTION)

SKLEARN_SCALE = _row(6, "Sklearn", 0, (
    "Problem:\nHow do I standardize each column of `data` to zero mean and unit variance?\nA:\n<code>\n"
    "import numpy as np\nfrom sklearn.preprocessing import StandardScaler\ndata = np.array([[1.0, 2.0], [3.0, 6.0]])\n"
    + BEGIN.format(var="scaled")),
    "scaled = StandardScaler().fit_transform(data)\n", '''import numpy as np
import copy
from sklearn.preprocessing import StandardScaler


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            data = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]])
        return data

    def generate_ans(data):
        return StandardScaler().fit_transform(data)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        np.testing.assert_allclose(result, ans)
        return 1
    except:
        return 0


exec_context = r"""
import numpy as np
from sklearn.preprocessing import StandardScaler
data = test_input
[insert]
result = scaled
"""''' + TEST_EXECUTION.format(n=1))

TORCH_CAT = _row(7, "Pytorch", 0, (
    "Problem:\nHow do I join two 1-d tensors end to end?\nA:\n<code>\nimport torch\na = torch.arange(3)\n"
    "b = torch.arange(2)\n" + BEGIN.format(var="result")),
    "result = torch.cat([a, b], dim=0)\n", '''import torch
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            a, b = torch.arange(3), torch.arange(2)
        return a, b

    def generate_ans(data):
        a, b = data
        return torch.cat([a, b], dim=0)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        torch.testing.assert_close(result, ans, check_dtype=False)
        return 1
    except:
        return 0


exec_context = r"""
import numpy as np
import torch
a, b = test_input
[insert]
"""''' + TEST_EXECUTION.format(n=1))

TENSORFLOW_ONES = _row(8, "Tensorflow", 0, (
    "Problem:\nHow do I make a tensor of ones of shape (2, 3)?\nA:\n<code>\nimport tensorflow as tf\n"
    + BEGIN.format(var="result")),
    "result = tf.ones((2, 3))\n", '''import tensorflow as tf
import copy


def generate_test_case(test_case_id):
    def generate_ans(data):
        return tf.ones((2, 3))

    test_input = None
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        assert tf.reduce_all(result == ans)
        return 1
    except:
        return 0


exec_context = r"""
import tensorflow as tf
[insert]
"""''' + TEST_EXECUTION.format(n=1))

ROWS = [NUMPY_RESHAPE, NUMPY_NO_LOOPS, PANDAS_SUM, PANDAS_FUNCTION, SCIPY_KS, MATPLOTLIB_LEGEND, SKLEARN_SCALE,
        TORCH_CAT, TENSORFLOW_ONES]
# Per problem id: a wrong snippet (NUMPY_NO_LOOPS's gets the values right, with a loop test_string refuses).
WRONG = {
    0: "B = A.reshape(-1, 1)\n",
    1: "result = np.array([sum(r) for r in a])\n",
    2: 'df["Sum"] = df.sum(axis=1)\n',
    3: "    return df\n",
    4: "statistic, p_value = stats.ttest_ind(x, y)\n",
    5: "plt.plot(x, y)\n",
    6: "scaled = data\n",
    7: "result = torch.stack([a, a])\n",
}
# More honest fixtures (ids 10-17), judged beside ROWS in test_verdicts_match_the_official_rule and used by
# tests/test_ds1000_cheats.py.
# A frame whose dtypes the official assertion checks (check_dtype=True): a MultiIndex with a
# datetime level (tz-aware in the second case), float NaN, a categorical and a nullable column.
PANDAS_TYPED = _row(10, "Pandas", 10, (
    "Problem:\nIndex the frame by user and time, sorted, and add a categorical 'cat' ('lo' below 2, else 'hi') and "
    "a nullable integer row number 'n'.\nA:\n<code>\nimport pandas as pd\ndf = pd.DataFrame({'user': ['a'], "
    "'when': pd.to_datetime(['2020-01-01']), 'v': [1.0]})\n" + BEGIN.format(var="result")), '''\
result = df.set_index(["user", "when"]).sort_index()
result["cat"] = pd.Categorical(["lo" if x < 2 else "hi" for x in result["v"].fillna(0)])
result["n"] = pd.array(range(len(result)), dtype="Int64")
''', '''import pandas as pd
import numpy as np
import copy


def generate_test_case(test_case_id):
    def generate_ans(data):
        df = data
        out = df.set_index(["user", "when"]).sort_index()
        out["cat"] = pd.Categorical(["lo" if x < 2 else "hi" for x in out["v"].fillna(0)])
        out["n"] = pd.array(range(len(out)), dtype="Int64")
        return out

    def define_test_input(test_case_id):
        if test_case_id == 1:
            df = pd.DataFrame({"user": ["b", "a", "a"], "when": pd.to_datetime(["2020-01-02", "2020-01-03", "2020-01-01"]),
                               "v": [3.0, np.nan, 1.5]})
        if test_case_id == 2:
            df = pd.DataFrame({"user": ["x", "x"], "when": pd.to_datetime(["2021-05-06", "2021-05-05"]).tz_localize("UTC"),
                               "v": [2.5, 0.5]})
        return df

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    pd.testing.assert_frame_equal(result, ans)
    return 1


exec_context = r"""
import pandas as pd
import numpy as np
df = test_input
[insert]
"""''' + TEST_EXECUTION.format(n=2), cases=2)

# Ragged rows as an object array, datetimes, a masked array.
NUMPY_OBJECTS = _row(11, "Numpy", 11, (
    "Problem:\nSplit `a` after each zero into an object array of arrays; give the dates of `days` and `a` masked "
    "where it is zero.\nA:\n<code>\nimport numpy as np\na = np.array([1, 0, 2, 3, 0, 4])\ndays = [3, 5]\n"
    "</code>\nresult = ... # put solution in this variable\nBEGIN SOLUTION\n<code>\n"), '''\
parts = np.split(a, np.flatnonzero(a == 0) + 1)
rows = np.empty(len(parts), dtype=object)
rows[:] = parts
result = (rows, np.datetime64("2020-01-01") + np.array(days, dtype="timedelta64[D]"), np.ma.masked_equal(a, 0))
''', '''import numpy as np
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            return np.array([1, 0, 2, 3, 0, 4]), [3, 5]

    def generate_ans(data):
        a, days = data
        parts = np.split(a, np.flatnonzero(a == 0) + 1)
        rows = np.empty(len(parts), dtype=object)
        rows[:] = parts
        return rows, np.datetime64("2020-01-01") + np.array(days, dtype="timedelta64[D]"), np.ma.masked_equal(a, 0)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    rows, dates, masked = result
    assert rows.dtype == object and len(rows) == len(ans[0])
    for r, e in zip(rows, ans[0]):
        np.testing.assert_array_equal(r, e)
    assert dates.dtype == ans[1].dtype
    np.testing.assert_array_equal(dates, ans[1])
    assert isinstance(masked, np.ma.MaskedArray)
    np.testing.assert_array_equal(masked.mask, ans[2].mask)
    np.testing.assert_array_equal(masked.filled(-1), ans[2].filled(-1))
    return 1


exec_context = r"""
import numpy as np
a, days = test_input
[insert]
"""''' + TEST_EXECUTION.format(n=1))

# DS-1000's sparse problems check the class and the entries.
SCIPY_SPARSE = _row(12, "Scipy", 12, (
    "Problem:\nStack two csr matrices vertically, keeping csr.\nA:\n<code>\nfrom scipy import sparse\n"
    "c1 = sparse.csr_matrix([[0, 1]])\nc2 = sparse.csr_matrix([[2, 0]])\n" + BEGIN.format(var="Feature")),
    "Feature = sparse.vstack((c1, c2)).tocsr()\n", '''import numpy as np
import copy
from scipy import sparse


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            c1 = sparse.csr_matrix([[0, 0, 1, 0], [2, 0, 0, 0], [0, 0, 0, 0]])
            c2 = sparse.csr_matrix([[0, 3, 4, 0], [0, 0, 0, 5], [6, 7, 0, 8]])
        return c1, c2

    def generate_ans(data):
        c1, c2 = data
        return sparse.vstack((c1, c2)).tocsr()

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    assert type(result) == sparse.csr_matrix
    assert len(sparse.find(result != ans)[0]) == 0
    return 1


exec_context = r"""
from scipy import sparse
c1, c2 = test_input
[insert]
result = Feature
"""''' + TEST_EXECUTION.format(n=1))

# exec_context's own closing assertions (as DS-1000's TfidfVectorizer-preprocessor problems):
# they run in the judge on the leaves' values; the literals never reach the candidate.
CLOSING_ASSERTS = _row(13, "Sklearn", 13, (
    "Problem:\nDefine `shout` that upper-cases its text and store it as `helper.fn`.\nA:\n<code>\n"
    + BEGIN.format(var="helper")), '''\
def shout(s):
    return s.upper()
class Helper:
    pass
helper = Helper()
helper.fn = shout
''', '''import tokenize, io


def generate_test_case(test_case_id):
    return None, None


def exec_test(result, ans):
    ns = {}
    exec("y = 2", ns)  # the test code's own exec: it runs where it is
    assert ns["y"] == 2
    return 1


exec_context = r"""
import numpy as np
[insert]
result = None
assert shout("aBc") == "ABC"
assert shout == helper.fn
"""''' + TEST_EXECUTION.format(n=1) + '''

def test_string(solution: str):
    tokens = []
    for token in tokenize.tokenize(io.BytesIO(solution.encode("utf-8")).readline):
        tokens.append(token.string)
    assert "shout" in tokens
''')

# A file the snippet writes (DS-1000's "save the fitted model" problem, its assertion on the file).
SAVED_FILE = _row(14, "Sklearn", 14, (
    "Problem:\nSave the fitted model to a file named \"sklearn_model\".\nA:\n<code>\nimport numpy as np\n"
    "fitted_model = load_data()\n" + BEGIN.format(var="")),
    'import pickle\nwith open("sklearn_model", "wb") as f:\n    pickle.dump(fitted_model, f)\n', '''import copy
import numpy as np


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            fitted_model = {"coef": np.arange(3.0)}
        return fitted_model

    def generate_ans(data):
        return None

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    return 1


exec_context = r"""import os
import pandas as pd
import numpy as np
if os.path.exists("sklearn_model"):
    os.remove("sklearn_model")
def creat():
    fitted_model = test_input
    return fitted_model
fitted_model = creat()
[insert]
result = None
assert os.path.exists("sklearn_model") and not os.path.isdir("sklearn_model")
"""''' + TEST_EXECUTION.format(n=1))

# The snippet draws from the random state generate_test_case left (crosses to the candidate).
RANDOM_STATE = _row(15, "Numpy", 15, (
    "Problem:\nDraw three uniform numbers from numpy's global generator.\nA:\n<code>\nimport numpy as np\n"
    + BEGIN.format(var="result")), "result = np.random.rand(3)\n", '''import numpy as np


def generate_test_case(test_case_id):
    np.random.seed(1234 + test_case_id)
    state = np.random.get_state()
    expected_result = np.random.rand(3)
    np.random.set_state(state)
    return None, expected_result


def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1


exec_context = r"""
import numpy as np
[insert]
"""''' + TEST_EXECUTION.format(n=2), cases=2)

# exec_tests that compare with `==` and with DataFrame.equals (as many of DS-1000's do).
NUMPY_EQ = _row(16, "Numpy", 16, (
    "Problem:\nCount the positive entries of each row of `a`.\nA:\n<code>\nimport numpy as np\n"
    "a = np.array([[1, -1], [2, 3]])\n" + BEGIN.format(var="result")), "result = (a > 0).sum(axis=1)\n", '''import numpy as np
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            np.random.seed(3)
            a = np.random.randint(-5, 5, (4, 6))
        return a

    def generate_ans(data):
        return (data > 0).sum(axis=1)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    assert (result == ans).all()
    return 1


exec_context = r"""
import numpy as np
a = test_input
[insert]
"""''' + TEST_EXECUTION.format(n=1))
PANDAS_EQUALS = _row(17, "Pandas", 17, (
    "Problem:\nDrop the rows with a missing 'v'.\nA:\n<code>\nimport pandas as pd\n"
    "df = pd.DataFrame({'v': [1.0, None]})\n" + BEGIN.format(var="result")), "result = df.dropna(subset=['v'])\n",
    '''import pandas as pd
import numpy as np
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            df = pd.DataFrame({"v": [1.0, np.nan, 3.0], "k": ["a", "b", "c"]})
        return df

    def generate_ans(data):
        return data.dropna(subset=["v"])

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    assert result.equals(ans)
    return 1


exec_context = r"""
import pandas as pd
import numpy as np
df = test_input
[insert]
"""''' + TEST_EXECUTION.format(n=1))

EXTRA_ROWS = [PANDAS_TYPED, NUMPY_OBJECTS, SCIPY_SPARSE, CLOSING_ASSERTS, SAVED_FILE, RANDOM_STATE, NUMPY_EQ,
              PANDAS_EQUALS]
# (problem id, snippet, the official verdict): references, wrong snippets, and honest snippets
# other than the reference (the legend plot whose pixels differ: its fallback assertions decide).
HONEST = [
    (10, PANDAS_TYPED["reference_code"], True),
    (10, PANDAS_TYPED["reference_code"].replace('dtype="Int64"', 'dtype="int64"'), False),  # a dtype the test checks
    (10, PANDAS_TYPED["reference_code"].replace(".sort_index()", ""), False),
    (11, NUMPY_OBJECTS["reference_code"], True),
    (11, NUMPY_OBJECTS["reference_code"].replace("masked_equal(a, 0)", "masked_equal(a, 1)"), False),
    (12, SCIPY_SPARSE["reference_code"], True),
    (12, "Feature = sparse.vstack((c1, c2)).tocoo()\n", False),  # coo, not csr
    (13, CLOSING_ASSERTS["reference_code"], True),
    (13, CLOSING_ASSERTS["reference_code"].replace("helper.fn = shout", "helper.fn = str.upper"), False),
    (13, "shout = str.swapcase\nhelper = None\n", False),
    (14, SAVED_FILE["reference_code"], True),
    (14, "import os\nos.makedirs('sklearn_model')\n", False),
    (15, RANDOM_STATE["reference_code"], True),
    (15, "np.random.seed(0)\nresult = np.random.rand(3)\n", False),
    (5, 'plt.plot(x, y, "r--", label="y")\nplt.legend()\n', True),
    (5, 'plt.plot(x, y, "r--", label="x")\nplt.legend()\n', False),
]

ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg"}

# The official rule, run here without a sandbox: exec the program with empty globals in a fresh
# temporary directory; it passes iff nothing is raised (an os._exit never reports a pass). One
# process imports the libraries the programs name, then forks a child per program (a fresh
# process state each, as a new interpreter's, at a fraction of the import time): the child
# execs the program and exits with PASSED_STATUS only once exec has returned.
PASSED_STATUS = 42
_OFFICIAL = r"""import json, os, signal, sys
base, verdicts = sys.argv[2], []
for name in json.loads(sys.argv[1]):
    try:
        __import__(name)
    except Exception:
        pass
for i, program in enumerate(json.loads(sys.stdin.read())):
    home = os.path.join(base, str(i))
    os.mkdir(home)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.chdir(home)
        os.environ["MPLCONFIGDIR"] = home
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        signal.alarm(120)
        try:
            exec(program, {})
        except BaseException:
            os._exit(3)
        os._exit(%(passed)d)
    _, status = os.waitpid(pid, 0)
    verdicts.append(os.WIFEXITED(status) and os.WEXITSTATUS(status) == %(passed)d)
print(json.dumps(verdicts))
""" % {"passed": PASSED_STATUS}


def official_program_text(context: str, solution: str) -> str:
    return (context + "\n" + f"code = {repr(solution)}\n" + "test_execution(code)\n"
            + ("test_string(code)\n" if "test_string(" in context else "\n"))


def official_verdicts(cases) -> list:
    """The official rule's verdict on each (code_context, solution) of `cases`, in order."""
    programs = [official_program_text(context, solution) for context, solution in cases]
    modules = sorted({m for context, _ in cases for m in preloads(context)})
    with tempfile.TemporaryDirectory() as base:
        env = {**os.environ, **ENV, "MPLCONFIGDIR": base}
        proc = subprocess.run([sys.executable, "-c", _OFFICIAL, json.dumps(modules), base], input=json.dumps(programs),
                              capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ds1000") / "ds1000.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in reversed(ROWS):  # the loader sorts by problem_id
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def task(data_file) -> DS1000:
    return DS1000(load_ds1000(data_file))


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    sb = Sandbox(timeout=60)
    sb.check()
    return sb


def test_loader_reads_the_published_format(data_file, tmp_path):
    problems = load_ds1000(data_file)
    assert [p.task_id for p in problems] == list(range(len(ROWS)))
    p = problems[3]
    assert isinstance(p, DS1000Problem)
    assert (p.library, p.library_problem_id, p.perturbation_type, p.test_case_cnt) == ("Pandas", 1, "Surface", 2)
    assert p.text == PANDAS_FUNCTION["prompt"] and p.tests == PANDAS_FUNCTION["code_context"]
    assert p.solution == PANDAS_FUNCTION["reference_code"]
    plain = tmp_path / "ds1000.jsonl"
    plain.write_text("\n".join(json.dumps(r) for r in ROWS[:2]) + "\n\n")
    assert [p.task_id for p in load_ds1000(str(plain))] == [0, 1]


@pytest.mark.slow
def test_unsupported_library_is_skipped_and_counted(task):
    skipped = {p.task_id: why for p, why in task.skipped}
    assert skipped[8].startswith("imports tensorflow")
    assert task.skip_counts()[skipped[8]] == 1
    assert 8 not in {p.task_id for p in task.problems}
    assert supported_libraries()["Tensorflow"].startswith("unsupported")
    for lib in ("Numpy", "Pandas", "Scipy", "Pytorch"):
        assert not supported_libraries()[lib].startswith("unsupported"), supported_libraries()


@pytest.mark.parametrize("lib", ["Matplotlib", "Sklearn"])
def test_matplotlib_and_sklearn_run_in_the_sandbox(lib, task):
    status = supported_libraries()[lib]
    if status.startswith("unsupported"):
        pytest.skip(f"{lib}: {status}")
    assert any(p.library == lib for p in task.problems)


def test_prompts_stops_and_extraction(task):
    p = task.problems[0]
    assert task.prompt(p).text == p.text and p.text.endswith("BEGIN SOLUTION\n<code>\n")
    assert set(STOPS) <= set(task.stops()) and "</code>" in task.stops() and "# SOLUTION END" in task.stops()
    chat = DS1000([p], "chatml")
    prompt = chat.prompt(p)
    assert prompt.messages == ({"role": "user", "content": p.text},) and prompt.assistant_prefix == "<code>\n"
    assert "\n```" in chat.stops()
    assert postprocess("B = A\n</code>\nmore") == "B = A\n"
    assert postprocess("```python\nB = A\n```\nThis reshapes A.") == "\nB = A\n"
    assert postprocess("<code>\nB = A\nEND SOLUTION\n") == "\nB = A"
    assert task.extract(p, "B = A\n# SOLUTION END\nplt.show()") == "B = A\n"
    assert task.extract(p, "    return df\n    ### END SOLUTION\n</code>") == "    return df\n    ### END SOLUTION\n"


def test_program_is_the_official_test_program(task):
    """The judge runs the official test program; the candidate's stage gets code_context (for
    the inputs step, which removes it) and the snippet, never the test program's end marker."""
    p = next(q for q in task.problems if q.task_id == 1)
    text = official_program(p, "result = a.sum(1)\n")
    assert text == p.tests + "\ncode = 'result = a.sum(1)\\n'\ntest_execution(code)\ntest_string(code)\n"
    q = task.problems[0]
    assert official_program(q, "x").endswith("\ncode = 'x'\ntest_execution(code)\n\n")
    program = task.program(p, "result = a.sum(1)\n")
    assert isinstance(program, Program) and program.judge is not None
    judge_files, program_files = dict(program.judge.files), dict(program.files)
    assert judge_files["ds1000_program.py"] == text and "ds1000_program.py" not in program_files
    assert program_files["ds1000_context.py"] == p.tests and program_files["ds1000_snippet.py"] == "result = a.sum(1)\n"
    assert not any(name.endswith("judge.py") for name in program_files)
    assert program.judge.end_marker and not program.end_marker
    assert program.judge.end_marker not in text and all(program.judge.end_marker not in str(f) for f in program.files)
    assert {"numpy", "pandas", "scipy"} <= set(program.libs)
    assert program.steps[0][-2:] == ("tokenize", "io")  # the modules the test code imports, preloaded
    assert preloads("from scipy import stats\nimport matplotlib.pyplot as plt, os\n") == (
        "matplotlib.pyplot", "os", "scipy", "scipy.stats")
    split = breakdown(task.problems, {"0": 1.0, "1": 0.0})
    assert split["library"] == {"Numpy": {"count": 2, "mean": 0.5}}
    assert split["perturbation_type"] == {"Origin": {"count": 1, "mean": 1.0}, "Semantic": {"count": 1, "mean": 0.0}}


@pytest.fixture(scope="module")
def extra_task(tmp_path_factory) -> DS1000:
    path = tmp_path_factory.mktemp("ds1000x") / "ds1000.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS + EXTRA_ROWS))
    return DS1000(load_ds1000(path))


@pytest.mark.slow
@needs_bwrap
def test_verdicts_match_the_official_rule(extra_task, sandbox):
    """References pass and wrong snippets fail, as the official rule (the test program exec'd in
    one process) says; beside ROWS: typed frames (dtypes, MultiIndex, tz), object, datetime and
    masked arrays, csr matrices, exec_context's own assertions, a saved file, random state, and a
    figure whose pixels differ from the expected one (its fallback assertions read the candidate's
    figure, rebuilt in the judge)."""
    problems = extra_task.problems
    assert len(problems) >= 12  # numpy, pandas, scipy, torch; matplotlib and sklearn when supported
    by_id = {p.task_id: p for p in problems}
    cases = ([(p, p.solution, True) for p in problems if p.task_id < 10]
             + [(p, WRONG[p.task_id], False) for p in problems if p.task_id < 10]
             + [(by_id[pid], code, good) for pid, code, good in HONEST if pid in by_id])
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:  # the official rule beside the sandbox
        official_run = pool.submit(official_verdicts, [(p.tests, code) for p, code, _ in cases])
        results = run_programs([extra_task.program(p, code) for p, code, _ in cases], sandbox, workers=2)
        reference = official_run.result()
    for (p, code, good), official, result in zip(cases, reference, results):
        assert official is good, f"problem {p.task_id} ({p.library}): the official rule says {official} for {code!r}"
        assert (result == "passed") is good, f"problem {p.task_id} ({p.library}) {code!r}: {result}"


@needs_bwrap
def test_early_exit_fails(task, sandbox):
    """sys.exit raises inside the candidate's exec (a test failure, as the official exec raises);
    os._exit leaves no values for the judge."""
    p = task.problems[0]
    cheats = [p.solution + "import sys\nsys.exit(0)\n", p.solution + "import os\nos._exit(0)\n",
              "import sys\nsys.exit(0)\n"]
    results = run_programs([task.program(p, c) for c in cheats], sandbox, workers=2)
    assert results == [RAISED, MISSING, RAISED], results


def _write(tmp_path, rows, name="bad.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _copy(row, **changes):
    out = json.loads(json.dumps(row))
    for key, value in changes.items():
        if key.startswith("meta_"):
            if value is None:
                del out["metadata"][key[5:]]
            else:
                out["metadata"][key[5:]] = value
        elif value is None:
            del out[key]
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("bad, message", [
    (_copy(NUMPY_RESHAPE, code_context=None), "bad.jsonl:2: DS-1000 record lacks 'code_context'"),
    (_copy(NUMPY_RESHAPE, prompt=3), "bad.jsonl:2: prompt: expected a string, got int"),
    (_copy(NUMPY_RESHAPE, metadata=[1]), "bad.jsonl:2: metadata: expected an object"),
    (_copy(NUMPY_RESHAPE, meta_library=None), "bad.jsonl:2: metadata lacks 'library'"),
    (_copy(NUMPY_RESHAPE, meta_problem_id="seven"), "bad.jsonl:2: metadata.problem_id 'seven': expected an integer"),
    (_copy(NUMPY_RESHAPE, code_context="import numpy as np\n"), "bad.jsonl:2: code_context does not define "
                                                                 "test_execution(solution)"),
    (_copy(NUMPY_RESHAPE, code_context="def test_execution(solution):\n    return (\n"),
     "bad.jsonl:2: code_context line 2: not valid Python"),
    (_copy(NUMPY_NO_LOOPS, meta_problem_id=0), "bad.jsonl:2: metadata.problem_id 0 repeats the one at"),
    ("{not json", "bad.jsonl:2: not JSON"),
])
def test_loader_errors_name_the_line(tmp_path, bad, message):
    with pytest.raises(EvalDataError) as e:
        load_ds1000(_write(tmp_path, [NUMPY_RESHAPE, bad]))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_loader_missing_file_and_unreachable_hub(tmp_path):
    with pytest.raises(EvalDataError, match="no such file"):
        load_ds1000(tmp_path / "ds1000.jsonl.gz")
    with pytest.raises(EvalDataError, match="no problems"):
        load_ds1000(_write(tmp_path, [], "empty.jsonl"))
    # In a child with the hub switched off (the env is read when huggingface_hub is imported),
    # so a machine without a network answers at once instead of after the client's retries.
    code = ("from easylemur.eval.benchmarks.ds1000 import load_ds1000\nfrom easylemur.eval.api import EvalDataError\n"
            "try:\n    load_ds1000(None)\nexcept EvalDataError as e:\n    print(e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert out.startswith("DS-1000 data 'xlangai/DS-1000': not a file") and "pass its path" in out, out


@pytest.mark.slow
def test_the_eval_cli_scores_samples_and_counts_those_of_skipped_problems(tmp_path):
    """`python -m easylemur.eval ds1000 --samples FILE --data FILE`: the reference solutions of
    two problems pass, a TensorFlow problem's sample is counted as not scored, not refused."""
    data = tmp_path / "ds1000.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [ROWS[0], ROWS[1], TENSORFLOW_ONES]))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": r["metadata"]["problem_id"], "completion": r["reference_code"]})
                               + "\n" for r in [ROWS[0], ROWS[1], TENSORFLOW_ONES]))
    p = subprocess.run([sys.executable, "-m", "easylemur.eval", "ds1000", "--samples", str(samples), "--data", str(data),
                        "--out", str(tmp_path / "out"), "--timeout", "60"],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"pass@1": 1.0, "n": 1, "problems": 2}
    assert "1 sample(s) of skipped problems not scored (imports tensorflow" in p.stderr
