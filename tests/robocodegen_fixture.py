"""A small RoboCodeGen notebook in the published one's format (Code as Policies' "Experiment_
Robot Code-Gen Benchmark.ipynb": a Jupyter notebook whose setup cell holds the harness, whose
prompt cell holds the prompts and execs the context into context_vars, and whose problems cell
holds the problems as dicts of f_name, f_sig, f_sol, test_input_args and test_equiv), with a few
of its problems and shorter prompts, written by the tests."""

from __future__ import annotations

import json
from pathlib import Path

SETUP = '''from copy import copy

def exec_safe(code_str, gvars, lvars):
  banned_phrases = ['import', '__']
  for phrase in banned_phrases:
    assert phrase not in code_str

  empty_fn = lambda *args, **kwargs: None
  custom_gvars = merge_dicts([
      gvars,
      {'exec': empty_fn, 'eval': empty_fn}
  ])
  exec(code_str, custom_gvars, lvars)

default_query_kwargs = {
    'engine': 'code-davinci-002',
    'max_tokens': 512,
    'temperature': 0,
    'frequency_penalty': 0
}

def lmp_batch(base_prompt, cmds, stop_tokens=None, strip=False, batch_size=20, rate_limit_time=6, query_kwargs=None):
    prompts = [
      f'{base_prompt}\\n{cmd}'
      for cmd in cmds
    ]
    return prompts

def lmp_fgen_batch(prompt, f_names, f_sigs, stop_tokens=['# define function:', '# example:'],
                   recurse=False, context_vars=None, bug_fix=False, log=True, query_kwargs=None,
                   rate_limit_time=6):
    queries = [f'# define function: {f_sig}.' for f_sig in f_sigs]
    f_srcs_list = lmp_batch(prompt, queries, stop_tokens=stop_tokens, query_kwargs=query_kwargs)
    return f_srcs_list

def merge_dicts(dicts):
    return {
        k : v
        for d in dicts
        for k, v in d.items()
    }

def eval_test(f_sol, f_gen, test_input_args, test_equiv=None):
  if test_equiv is None:
    test_equiv = lambda out_f_sol, out_f_gen: np.allclose(out_f_sol, out_f_gen)

  test_success = True
  for test_input_arg in test_input_args:
    out_correct = f_sol(*test_input_arg)
    out_f_gen = f_gen(*test_input_arg)

    if not test_equiv(out_correct, out_f_gen):
      test_success = False
      break
  return test_success
'''

PROMPTS = """prompt_f_gen = '''
import numpy as np
from shapely.geometry import *
from shapely.affinity import *
from utils import get_obj_outer_pts_np

# define function: total = get_total(xs=numbers).
def get_total(xs):
    return np.sum(xs)

# define function: pt_np = move_pt_left(pt_np, dist).
def move_pt_left(pt_np, dist):
    delta = np.array([-dist, 0])
    return translate_pt_np(pt_np, delta=delta)
'''.strip()

prompt_f_gen_flat = '''
import numpy as np
from shapely.geometry import *
from shapely.affinity import *
from utils import get_obj_outer_pts_np

# define function: total = get_total(xs=numbers).
def get_total(xs):
    return np.sum(xs)

# define function: pt_np = move_pt_left(pt_np, dist).
def move_pt_left(pt_np, dist):
    return pt_np + [-dist, 0]

# example: getting object points of object0.
pts_np = get_obj_outer_pts_np('object0')
'''.strip()

prompt_f_gen_exec = '''
import numpy as np
from shapely.geometry import *
from shapely.affinity import *

# define function: total = get_total(xs=numbers).
def get_total(xs):
    return np.sum(xs)

# define function: pt = move_pt_left(pt, dist).
def move_pt_left(pt, dist):
    return pt + [-dist, 0]
'''.strip()

context_vars = {}
exec(prompt_f_gen_exec, context_vars)"""

PROBLEMS = """import numpy as np
import shapely
from shapely.geometry import *
from shapely.affinity import *
from operator import eq

def rotate_pts_around_pts_center_np(pts_np, angle_deg):
  angle_rad = np.deg2rad(angle_deg)
  centroid = np.mean(pts_np, axis=0)
  R = np.array([
      [np.cos(angle_rad), -np.sin(angle_rad)],
      [np.sin(angle_rad), np.cos(angle_rad)]
  ])
  new_pts = (pts_np - centroid) @ R.T + centroid
  return new_pts

problems_np = [
  {
    'f_name': 'get_top_most_idx',
    'f_sig': 'idx = get_top_most_idx(points_np)',
    'f_sol': lambda points_np: np.argmax(points_np[:, 1]),
    'test_input_args': [(np.random.random((10, 2)),) for _ in range(5)],
    'test_equiv': np.allclose
  },
  {
    'f_name': 'rotate_pts_around_pts_center_np',
    'f_sig': 'new_pts_np = rotate_pts_around_pts_center_np(pts_np, angle_deg)',
    'f_sol': rotate_pts_around_pts_center_np,
    'test_input_args': [(np.random.random((10, 2)), np.random.random()) for _ in range(5)],
    'test_equiv': np.allclose
  },
]

shape_eq = lambda f_sol_out, f_gen_out: np.allclose(f_sol_out.union(f_gen_out).area, f_sol_out.area, f_gen_out.area)

make_rectangle = lambda width, height, center: box(center[0] - width / 2, center[1] - height / 2, \
center[0] + width / 2, center[1] + height / 2)

problems_shapely = [
  {
    'f_name': 'get_points_from_polygon',
    'f_sig': 'points_np = get_points_from_polygon(polygon)',
    'f_sol': lambda polygon: np.array(polygon.exterior.coords),
    'test_input_args': [(Polygon(np.random.random((6, 2))),) for _ in range(5)],
    'test_equiv': np.allclose
  },
  {
    'f_name': 'make_line',
    'f_sig': 'line = make_line(start_pt_np, end_pt_np)',
    'f_sol': lambda start_pt_np, end_pt_np: LineString([start_pt_np, end_pt_np]),
    'test_input_args': [(np.random.random(2), np.random.random(2)) for _ in range(5)],
    'test_equiv': eq
  },
  {
    'f_name': 'make_circle',
    'f_sig': 'circle = make_circle(radius, center)',
    'f_sol': lambda radius, center: Point(center).buffer(radius),
    'test_input_args': [(np.random.random(), np.random.random(2)) for _ in range(5)],
    'test_equiv': shape_eq
  },
]

obj_names = ['block0', 'block1', 'block2', 'block3']
obj_positions = np.array([
    [0, 0],
    [0.1, 0],
    [0.5, 0.5],
    [0, 0.9],
])
sizes = [0.15, 0.1, 0.2, 0.05]
obj_boxes = [make_rectangle(size, size, pos) for pos, size in zip(obj_positions, sizes)]
obj_outer_pts_np_map = {
    obj_name: np.array(obj_box.exterior.coords)
    for obj_name, obj_box in zip(obj_names, obj_boxes)
}
get_obj_outer_pts_np = lambda obj_name: obj_outer_pts_np_map[obj_name]
obj_names0 = obj_names[:2]
obj_names1 = obj_names[2:]

def get_name_of_biggest_obj(obj_names):
    biggest_obj_name = None
    biggest_obj_area = 0
    for obj_name in obj_names:
        obj_area = get_obj_area(obj_name)
        if obj_area > biggest_obj_area:
            biggest_obj_area = obj_area
            biggest_obj_name = obj_name
    return biggest_obj_name

def get_obj_area(obj_name):
    pts_np = get_obj_outer_pts_np(obj_name)
    polygon = Polygon(pts_np)
    return polygon.area

problems_api = [
  {
    'f_name': 'get_name_of_biggest_obj',
    'f_sig': 'obj_name = get_name_of_biggest_obj(obj_names)',
    'f_sol': get_name_of_biggest_obj,
    'test_input_args': [(obj_names0,), (obj_names1,)],
    'test_equiv': eq
  },
]

all_problems = problems_np + problems_shapely + problems_api
print('n problems:', len(all_problems))

context_vars['get_obj_outer_pts_np'] = get_obj_outer_pts_np"""

NOTEBOOK = "Experiment_ Robot Code-Gen Benchmark.ipynb"


def _cell(kind: str, text: str) -> dict:
    lines = text.splitlines(keepends=True)
    cell = {"cell_type": kind, "metadata": {}, "source": lines}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(problems: str = PROBLEMS) -> str:
    """The notebook's JSON text, its cells in the published one's order."""
    cells = [_cell("markdown", "# Experiment: RoboCodeGen Benchmark\n"),
             _cell("code", "openai_api_key = 'YOUR KEY HERE'"),
             _cell("code", "! pip install numpy scipy shapely openai pygments RestrictedPython > /dev/null 2>&1\n"),
             _cell("code", SETUP), _cell("markdown", "## Prompt"), _cell("code", PROMPTS),
             _cell("markdown", "## Problems"), _cell("code", problems),
             _cell("code", "for p in all_problems:\n  print(p['f_sig'])")]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 0}, indent=1)


def write_cap(root: Path, problems: str = PROBLEMS) -> Path:
    """`root` laid out as google-research's repository (code_as_policies/<notebook>); returns root."""
    (root / "code_as_policies").mkdir(parents=True, exist_ok=True)
    (root / "code_as_policies" / NOTEBOOK).write_text(notebook(problems))
    return root
