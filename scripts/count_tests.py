#!/usr/bin/env python3
"""Count, per chapter, the exported definitions and how many are followed directly by a test cell.

An exported definition is a top-level `def` or `class` in an `#| export` cell (a `@patch`ed function counts as one).
It is *followed directly by a test* when the next code cell (markdown cells and the read-only `show_hp(...)` cells are
skipped) calls a test (`test_eq`, `test_close`, `test_fail`, `test_ne`, `test_is` or `assert`) and mentions the
definition: its name (for a patched hook, the hook's name) or, for a class, a variable bound to an instance of it
anywhere in the notebook (`x = Cls(...)`) or the name it is registered under (`@register('name')`, `@register_plugin('name')`)
as a string (`'name'`, as in `get_method('name')` or `FedConfig(method='name')`).

Usage: `python scripts/count_tests.py [--json OUT] [--fail-under PCT] [notebooks ...]` from the repository root.
Reads the notebooks as plain JSON; nothing is imported from the package.
"""
from __future__ import annotations
import argparse, ast, json, re, sys
from pathlib import Path

NBS = Path(__file__).resolve().parent.parent/'nbs'
METHOD = ['05_realign', '06_fedloge', '08_baselines', '08a_baselines_lt', '08b_pfl', '09_fedetf', '09a_gmv', '09b_ecl', '09c_optimisers']
CORE = ['00_etf', '01_sse_c', '02_partition', '02a_datasets', '02b_data', '03_models', '03a_guards', '03b_evaluation',
        '03c_hparams', '03d_paper_tables', '04_federated', '04_registry', '04a_engine']
TEST_CALL = re.compile(r'\b(?:test_eq|test_close|test_fail|test_ne|test_is)\s*\(|^\s*assert\b|[;:]\s*assert\b', re.M)
SHOW_HP = re.compile(r'^\s*(?:from\s+\S+\s+import\s+show_hp\s*)?$|^\s*show_hp\s*\(.*$|^\s*#.*$')

def _src(cell) -> str: return ''.join(cell['source']) if isinstance(cell['source'], list) else cell['source']

def _directives(src: str) -> set[str]:
    return {l[2:].strip().split()[0] for l in src.splitlines() if l.startswith('#|') and l[2:].strip()}

def _is_show_hp(src: str) -> bool:
    "A docs-table cell: only `show_hp(...)` calls (and their import, comments)."
    lines = [l for l in src.splitlines() if l.strip()]
    return bool(lines) and any('show_hp(' in l for l in lines) and all(SHOW_HP.match(l) for l in lines)

def _parse(src: str):
    "The cell's AST, with IPython lines (magics, shell escapes) blanked out; None if it still does not parse."
    clean = '\n'.join('' if l.lstrip().startswith(('%', '!')) else l for l in src.splitlines())
    try: return ast.parse(clean)
    except SyntaxError: return None

def _registered(node) -> set[str]:
    "The names a class is registered under by `@register('name')` / `@register_plugin('name')`."
    return {d.args[0].value for d in node.decorator_list
            if isinstance(d, ast.Call) and getattr(d.func, 'id', getattr(d.func, 'attr', '')) in ('register', 'register_plugin')
            and d.args and isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str)}

def _definitions(tree) -> list[tuple[str, str, set]]:
    "(name, kind, registered names) for each top-level def/class; kind is 'class', 'patch' or 'def'."
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef): out.append((node.name, 'class', _registered(node)))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            patched = any((d.id if isinstance(d, ast.Name) else getattr(d, 'attr', getattr(getattr(d, 'func', None), 'id', '')))
                          in ('patch', 'patch_to') for d in node.decorator_list)
            out.append((node.name, 'patch' if patched else 'def', set()))
    return out

def _instances(trees, classes: set[str]) -> dict[str, set[str]]:
    "Class name -> the variables bound to one of its instances anywhere in the notebook (`x = Cls(...)`, `a, b = Cls(...), ...`)."
    inst = {c: set() for c in classes}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign): continue
            pairs = []
            for t in node.targets:
                if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts):
                    pairs += list(zip(t.elts, node.value.elts))
                else: pairs.append((t, node.value))
            for t, v in pairs:
                if isinstance(t, ast.Name) and isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in inst:
                    inst[v.func.id].add(t.id)
    return inst

def _mentions(src: str, names, strings=()) -> bool:
    "Does `src` name one of `names` (as a word) or hold one of `strings` as a quoted literal?"
    return (any(re.search(rf'(?<!\w){re.escape(n)}(?!\w)', src) for n in names)
            or any(f"'{s}'" in src or f'"{s}"' in src for s in strings))

def count(path: Path) -> dict:
    "Exported definitions of one notebook and which of them the next code cell tests."
    cells = [c for c in json.loads(path.read_text())['cells'] if c['cell_type'] == 'code']
    srcs = [_src(c) for c in cells]
    trees = [t for t in map(_parse, srcs) if t is not None]
    defs = []                                                            # (name, kind, registered names, index of its cell)
    for i, s in enumerate(srcs):
        if 'export' not in _directives(s): continue
        tree = _parse(s)
        if tree is not None: defs += [(n, k, r, i) for n, k, r in _definitions(tree)]
    inst = _instances(trees, {n for n, k, _, _ in defs if k == 'class'})
    rows = []
    for name, kind, reg, i in defs:
        j = i + 1
        while j < len(srcs) and _is_show_hp(srcs[j]): j += 1
        nxt = srcs[j] if j < len(srcs) and 'export' not in _directives(srcs[j]) else ''
        names = {name} | (inst.get(name, set()) if kind == 'class' else set())
        rows.append({'name': name, 'kind': kind, 'tested': bool(TEST_CALL.search(nxt)) and _mentions(nxt, names, reg)})
    return {'notebook': path.stem, 'defs': len(rows), 'tested': sum(r['tested'] for r in rows),
            'untested': [r['name'] for r in rows if not r['tested']]}

def _pct(t, n): return 100.0 * t / n if n else 100.0

def report(stems) -> dict:
    "Per-notebook counts plus the totals of the method and core chapters."
    per = {s: count(NBS/f'{s}.ipynb') for s in stems if (NBS/f'{s}.ipynb').exists()}
    tot = {}
    for group, members in (('method', METHOD), ('core', CORE)):
        rs = [per[s] for s in members if s in per]
        if rs: tot[group] = {'defs': sum(r['defs'] for r in rs), 'tested': sum(r['tested'] for r in rs)}
    return {'notebooks': per, 'totals': tot}

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('notebooks', nargs='*', help='notebook stems (default: the method and core chapters)')
    p.add_argument('--json', help='also write the counts to this JSON file')
    p.add_argument('--fail-under', type=float, help='exit 1 if a method chapter has a smaller percentage tested')
    p.add_argument('-v', '--verbose', action='store_true', help='list the untested definitions')
    a = p.parse_args(argv)
    stems = [Path(s).stem for s in a.notebooks] or METHOD + CORE
    r = report(stems)
    for s, c in r['notebooks'].items():
        print(f"{s:22s} {c['tested']:3d} / {c['defs']:3d}  {_pct(c['tested'], c['defs']):5.1f}%"
              + (f"   untested: {', '.join(c['untested'])}" if a.verbose and c['untested'] else ''))
    for g, c in r['totals'].items():
        print(f"{'total ' + g:22s} {c['tested']:3d} / {c['defs']:3d}  {_pct(c['tested'], c['defs']):5.1f}%")
    if a.json: Path(a.json).write_text(json.dumps(r, indent=1) + '\n')
    if a.fail_under is not None:
        low = [s for s, c in r['notebooks'].items() if s in METHOD and _pct(c['tested'], c['defs']) < a.fail_under]
        if low: print('below', a.fail_under, '%:', ', '.join(low)); return 1
    return 0

if __name__ == '__main__': sys.exit(main())
