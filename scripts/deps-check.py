#!/usr/bin/env python3
"""deps-check: the include rules of README "Architecture", checked on src/ and cuda/.

  1. Layers, lowest first (LAYERS below): a file of src/L/ or cuda/L/ includes headers of
     src/M/ (and cuda/M/) only for M at or below L.
  2. A private header (*_internal.h, *.cuh) is included only from its own folder.
  3. No cycle between modules: module x is x.h (with x_internal.h, its private part) and
     the x.c that implements it; x depends on y when one of its files includes y.h. A cycle
     (x -> ... -> x) is an error even inside one layer.
  4. src/ includes no CUDA header.
Prints each violation as FILE: message and exits 1 when there is any.
"""
import os
import re
import sys

LAYERS = ['base', 'compute', 'comm', 'model', 'parallel', 'config', 'io', 'plan', 'app']
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)
CUDA_HEADERS = ('cuda_runtime.h', 'cuda.h', 'cublasLt.h', 'cublas_v2.h', 'nccl.h', 'cuda_bf16.h')


def sources(root):
    for top in ('src', 'cuda'):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(('.c', '.h', '.cu', '.cuh')):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def resolve(root, path, target):
    """The repository path of an include "target" seen from `path`, or None."""
    here = os.path.normpath(os.path.join(os.path.dirname(path), target))
    if os.path.exists(os.path.join(root, here)):
        return here
    if os.path.exists(os.path.join(root, 'src', target)):
        return os.path.join('src', target)
    return None


def module_of(path):
    stem = os.path.splitext(path)[0]
    return stem[:-len('_internal')] if stem.endswith('_internal') else stem


def layer_of(path):
    parts = path.split(os.sep)
    return parts[1] if len(parts) > 2 else None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    errors = []
    deps = {}  # module stem (with folder) -> set of module stems it includes
    for path in sources(root):
        text = open(os.path.join(root, path)).read()
        layer = layer_of(path)
        if layer not in RANK:
            errors.append('%s: in no layer folder (%s)' % (path, ', '.join(LAYERS)))
            continue
        stem = module_of(path)
        for kind, target in INCLUDE.findall(text):
            if kind == '<':
                if path.startswith('src') and target.split('/')[-1] in CUDA_HEADERS:
                    errors.append('%s: src/ includes the CUDA header <%s>' % (path, target))
                continue
            dep = resolve(root, path, target)
            if dep is None:
                errors.append('%s: includes "%s", which is not in the tree' % (path, target))
                continue
            dep_layer = layer_of(dep)
            if dep_layer in RANK and RANK[dep_layer] > RANK[layer]:
                errors.append('%s: layer %s includes %s of the higher layer %s' %
                              (path, layer, dep, dep_layer))
            private = dep.endswith(('_internal.h', '.cuh'))
            if private and os.path.dirname(dep) != os.path.dirname(path):
                errors.append('%s: includes the private header %s of another folder' % (path, dep))
            dep_stem = module_of(dep)
            if dep.endswith('.h') and dep_stem != stem:
                deps.setdefault(stem, set()).add(dep_stem)
    # Module cycles: depth-first search over the stems that have a header.
    state = {}
    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(deps.get(node, ())):
            if state.get(nxt) == 1:
                cycle = trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
                errors.append('module cycle: ' + ' -> '.join(cycle))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2
    for node in sorted(deps):
        if node not in state:
            visit(node, [node])
    for e in errors:
        print(e)
    if errors:
        print('deps-check: %d violations (layers, lowest first: %s)' % (len(errors), ' -> '.join(LAYERS)))
        return 1
    print('deps-check: ok (layers, lowest first: %s)' % ' -> '.join(LAYERS))
    return 0


if __name__ == '__main__':
    sys.exit(main())
