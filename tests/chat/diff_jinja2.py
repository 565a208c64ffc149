#!/usr/bin/env python3
"""diff_jinja2.py - developer tool (not a ctest): differential check of the
chat layer against Python Jinja2 set up the way HF apply_chat_template sets it
up (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, HF's tojson,
raise_exception, strftime_now).

It generates random inputs, renders them with Jinja2 and with
`offkv chat-render`, and reports every difference:

  conversations  random conversations (system prompts, tool calls, tool
                 results, reasoning, unicode/whitespace content, tools) through
                 the real fixture templates
  engine         random small templates: expressions (filters, tests,
                 methods, operators, slicing), statements (scoping, namespace,
                 macros, loops, break/continue, for-else, block set) and
                 whitespace control (-/+ markers, trim/lstrip_blocks)

Usage (from the repo root, after building the offkv CLI):
  pip install jinja2
  python3 tests/chat/diff_jinja2.py --offkv build/src/cli/offkv [--seed 1] [--n 300]

Known, accepted differences in `engine` mode are skipped: Python object
reprs (`range(...)`, `<generator ...>`, `dict_keys(...)`), which templates
never print on purpose. (Also accepted, not generated here: integers beyond
int64, which Python keeps exact and the C engine refuses or turns to floats.)
"""
import argparse, json, os, random, subprocess, sys, tempfile
from datetime import datetime, timezone

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIX = '../shared/fixtures/'
NOW = 1721995200  # strftime_now's clock on both sides


def hf_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters['tojson'] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise Exception(msg)
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = lambda f: datetime.fromtimestamp(NOW, timezone.utc).strftime(f)
    return env


def run_offkv(offkv, config_path, template_path, cases):
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, 'in.jsonl'), os.path.join(d, 'out.jsonl')
        with open(inp, 'w') as f:
            for c in cases:
                f.write(json.dumps(c, ensure_ascii=False) + '\n')
        cmd = [offkv, 'chat-render', '--tokenizer-config', config_path, '--jsonl', inp, '--out', out, '--now', str(NOW)]
        if template_path:
            cmd += ['--template', template_path]
        r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:  # e.g. the template does not parse: every case fails
            return [{'error': r.stderr.strip()} for _ in cases]
        return [json.loads(l) for l in open(out)]


def compare(label, cases, want, got, show=3):
    bad = 0
    for c, w, g in zip(cases, want, got):
        if 'rendered' in w and g.get('rendered') == w['rendered']:
            continue
        if 'error' in w and 'error' in g:
            continue
        bad += 1
        if bad <= show:
            print('DIFF', label, json.dumps(c, ensure_ascii=False)[:400])
            print('  jinja2:', repr(w.get('rendered', w.get('error')))[:400])
            print('  offkv: ', repr(g.get('rendered', g.get('error')))[:400])
    print('%-28s %5d cases, %d differ' % (label, len(cases), bad))
    return bad


# ---- conversations through the real templates ---------------------------

SUITES = {  # name: (config giving tokens, template file or None = config's)
    'llama3': ('tokenizers/llama3/tokenizer_config.json', None),
    'llama3_1': ('tokenizers/llama3_1/tokenizer_config.json', None),
    'qwen3': ('tokenizers/qwen3/tokenizer_config.json', None),
    'gemma3': ('tokenizers/gemma3/tokenizer_config.json', None),
    'llama3.1': ('tokenizers/llama3_1/tokenizer_config.json', 'chat_templates/llama3.1-8b-instruct/template.jinja'),
    'llama3.2': ('tokenizers/llama3_1/tokenizer_config.json', 'chat_templates/llama3.2-3b-instruct/template.jinja'),
    'gemma4': ('tokenizers/gemma3/tokenizer_config.json', 'chat_templates/gemma4-31b-it/template.jinja'),
}
TEXTS = ['hi', '  padded \n', '\u00a0nbsp\u00a0', '\x1cfs\x1d', 'multi\nline\n\ncode', '<think>\nr\n</think>\n\nans',
         'x</think>y', '', 'é中🦙', '{"a": 1}', "quote ' and \"", '<tool_response>\nz\n</tool_response>',
         '<|channel>thought\nT<channel|>final', 'a\tb', ' \u2003em ']


def conversation(rng, name):
    multimodal = name.startswith('gemma')
    tooling = name in ('qwen3', 'gemma4', 'llama3.1', 'llama3.2')

    def content():
        if multimodal and rng.random() < 0.15:
            return [{'type': 'text', 'text': rng.choice(TEXTS)}] + ([{'type': 'image'}] if rng.random() < 0.3 else [])
        return rng.choice(TEXTS)

    def args():
        r = rng.random()
        if r < 0.4:
            return {'city': rng.choice(TEXTS), 'n': rng.randint(-5, 100), 'f': rng.choice([1.0, 0.25]),
                    'ok': rng.random() < 0.5, 'nested': {'z': [1, 'b', None], 'a': {}}}
        return json.dumps({'q': 'x'}) if r < 0.6 else {}

    msgs = []
    if rng.random() < 0.4:
        msgs.append({'role': 'developer' if name == 'gemma4' and rng.random() < 0.3 else 'system', 'content': content()})
    for turn in range(rng.randint(1, 3)):
        msgs.append({'role': 'user', 'content': content()})
        if tooling and rng.random() < 0.35:
            calls = []
            for j in range(rng.choice([1, 1, 2])):
                tc = {'type': 'function', 'function': {'name': rng.choice(['get_weather', 'search']), 'arguments': args()}}
                if rng.random() < 0.5:
                    tc['id'] = 'call_%d' % j
                calls.append(tc)
            m = {'role': 'assistant', 'content': rng.choice(['', 'calling', None]), 'tool_calls': calls}
            if m['content'] is None:
                del m['content']
            if rng.random() < 0.4:
                m['reasoning_content'] = 'thinking...'
            msgs.append(m)
            for tc in calls:
                tm = {'role': 'tool', 'content': rng.choice(['{"t": 20}', 'sunny'])}
                if 'id' in tc:
                    tm['tool_call_id'] = tc['id']
                msgs.append(tm)
            msgs.append({'role': 'assistant', 'content': content()})
        elif turn < 2 or rng.random() < 0.5:
            m = {'role': 'assistant', 'content': content()}
            if name in ('qwen3', 'gemma4') and rng.random() < 0.3:
                m['reasoning_content'] = 'because\n'
            msgs.append(m)
    case = {'messages': msgs, 'add_generation_prompt': rng.random() < 0.5, 'kwargs': {}}
    if tooling and rng.random() < 0.4:
        props = {'location': {'type': 'string', 'description': 'City'}, 'unit': {'type': 'string', 'enum': ['c', 'f']},
                 'days': {'type': 'integer'}, 'tags': {'type': 'array', 'items': {'type': 'string'}},
                 'opts': {'type': 'object', 'properties': {'deep': {'type': 'boolean'}}, 'required': ['deep']}}
        keys = rng.sample(sorted(props), rng.randint(0, len(props)))
        case['tools'] = [{'type': 'function', 'function': {'name': 'fn', 'description': rng.choice(TEXTS), 'parameters': {
            'type': 'object', 'properties': {k: props[k] for k in keys}, 'required': keys[:1]}}}]
    if name in ('qwen3', 'gemma4') and rng.random() < 0.5:
        case['kwargs']['enable_thinking'] = rng.random() < 0.5
    if name == 'llama3.2':
        case['kwargs']['date_string'] = '1 Jan 2025'
    return case


def check_conversations(offkv, rng, n):
    env, bad = hf_env(), 0
    for name, (cfg_rel, tpl_rel) in SUITES.items():
        cfg = json.load(open(FIX + cfg_rel))
        src = open(FIX + tpl_rel).read() if tpl_rel else cfg['chat_template']
        tmpl = env.from_string(src)
        tokens = {}
        for k in ('bos_token', 'eos_token', 'unk_token', 'pad_token'):
            v = cfg.get(k)
            v = v.get('content') if isinstance(v, dict) else v
            if v:
                tokens[k] = v
        cases, want = [conversation(rng, name) for _ in range(n)], []
        for c in cases:
            ctx = dict(messages=c['messages'], tools=c.get('tools'), documents=None,
                       add_generation_prompt=c['add_generation_prompt'], **tokens)
            ctx.update(c['kwargs'])
            try:
                want.append({'rendered': tmpl.render(**ctx)})
            except Exception as e:
                want.append({'error': str(e)})
        got = run_offkv(offkv, FIX + cfg_rel, FIX + tpl_rel if tpl_rel else None, cases)
        bad += compare('conversations/' + name, cases, want, got)
    return bad


# ---- random templates -------------------------------------------------------

VARS = {'s': ' Hello, World ', 'e': '', 'n': 7, 'z': 0, 'f': 2.5, 'neg': -3, 'l': [3, 1, 2], 'sl': ['b', 'A', 'c'],
        'd': {'b': 1, 'A': 2, 'c': None}, 'm': [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'yo'}],
        'u': 'é中🦙', 't': True, 'no': None, 'nested': {'x': {'y': [1, {'z': 'deep'}]}}, 'pairs': [[1, 'a'], [2, 'b']]}
ATOMS = ['s', 'e', 'n', 'z', 'f', 'neg', 'l', 'sl', 'd', 'm', 'u', 't', 'no', 'undef', 'nested', "'abc'", '"q\\"x"', '3',
         '-1', '1.5', 'true', 'none', '[]', '[1, "a"]', "{'k': 'v'}", '(1, 2)', 'm[0]', 'nested.x.y', 'd.b', "d['A']",
         'l[1:]', 'l[::-1]', 's[1:4]', 'u[1]', 'u[::-1]']
FILTERS = ['trim', 'length', 'upper', 'lower', 'first', 'last', 'list', 'string', 'tojson', 'dictsort', 'join',
           "join(',')", 'sort', 'int', 'float', 'abs', 'capitalize', 'title', "default('D')", 'default(1, true)',
           "replace('l', 'L')", "map('upper') | list", "select('odd') | list", "selectattr('role', 'equalto', 'user') | list",
           "map(attribute='role') | join", 'tojson(indent=2)', 'count', 'sum', 'min', 'max', 'wordcount', 'round']
TESTS = ['defined', 'undefined', 'none', 'string', 'number', 'mapping', 'iterable', 'sequence', 'boolean', 'true',
         'false', 'integer', 'float', 'odd', 'even', 'divisibleby(2)', 'equalto(3)', 'lower', 'upper', 'in([1, 2, 3])']
METHODS = ['strip()', "rstrip('d ')", 'split()', "split(',')", "startswith(' H')", "endswith('d ')", 'upper()',
           "replace('o', '0')", "find('o')", "count('l')", "get('b')", "get('x', 5)", 'items()']
OPS = ['+', '-', '*', '/', '//', '%', '~', '==', '!=', '<', '>', '<=', '>=', 'and', 'or', 'in', 'not in', '**']


def expr(rng, d):
    r = rng.random()
    if d <= 0 or r < 0.25:
        return rng.choice(ATOMS)
    if r < 0.45:
        return '%s | %s' % (expr(rng, d - 1), rng.choice(FILTERS))
    if r < 0.55:
        return '%s is %s%s' % (expr(rng, d - 1), rng.choice(['', 'not ']), rng.choice(TESTS))
    if r < 0.65:
        return '(%s).%s' % (expr(rng, d - 1), rng.choice(METHODS))
    if r < 0.85:
        return '(%s %s %s)' % (expr(rng, d - 1), rng.choice(OPS), expr(rng, d - 1))
    if r < 0.95:
        return '(%s if %s else %s)' % (expr(rng, d - 1), expr(rng, d - 1), expr(rng, d - 1))
    return '[%s, %s]' % (expr(rng, d - 1), expr(rng, d - 1))


def stmt(rng, d, in_loop):
    r = rng.random()
    val = lambda: rng.choice(['1', "'s'", 'a', 'b', 'x', 'ns.c', 'ns.c + 1', 'a ~ b', 'm1(x)', "m2(1, q='Q')", 'undef', expr(rng, 1)])
    if r < 0.2:
        return '{{ %s }}' % val()
    if r < 0.35:
        return '{%% set %s = %s %%}' % (rng.choice(['a', 'b', 'x']), val())
    if r < 0.42:
        return '{%% set ns.c = %s %%}' % val()
    if r < 0.48 and in_loop:
        return rng.choice(['{{ loop.index }}', '{{ loop.revindex0 }}', '{{ loop.first }}', '{{ loop.last }}',
                           '{{ loop.length }}', '{{ loop.previtem }}', '{% break %}', '{% continue %}'])
    if r < 0.65 and d < 3:
        target = 'x' if rng.random() < 0.7 else 'a, b'
        seq = rng.choice(['l', 'sl', 'e', 'd', 'range(3)', "'hey'", 'pairs', 'd | dictsort', 'd.items()'])
        cond = ' if x' if target == 'x' and rng.random() < 0.2 else ''
        other = '{%% else %%}%s' % block(rng, d + 1, in_loop) if rng.random() < 0.3 else ''
        return '{%% for %s in %s%s %%}%s%s{%% endfor %%}' % (target, seq, cond, block(rng, d + 1, True), other)
    if r < 0.8 and d < 3:
        return '{%% if %s %%}%s{%% elif %s %%}%s{%% else %%}%s{%% endif %%}' % (
            val(), block(rng, d + 1, in_loop), val(), block(rng, d + 1, in_loop), block(rng, d + 1, in_loop))
    if r < 0.85:
        return '{%% set blk %%}[%s]{%% endset %%}{{ blk }}' % block(rng, d + 1, False)
    ws = rng.choice(['', ' ', '\n', '  \n', '\t', '\u00a0', '\n  '])
    mod = lambda: rng.choice(['', '', '-', '+'])
    return rng.choice(['%s{%%%s if x %s%%}%s{%% endif %%}' % (ws, mod(), mod(), ws), '%s{#%s c %s#}%s' % (ws, mod(), mod(), ws),
                       '%s{{%s x %s}}%s' % (ws, rng.choice(['', '-']), rng.choice(['', '-']), ws)])


def block(rng, d, in_loop):
    return ''.join(stmt(rng, d, in_loop) for _ in range(rng.randint(1, 3)))


HEAD = ("{% set ns = namespace(c=0) %}{% macro m1(p) %}(m1 {{ p }} {{ a }} {{ ns.c }}){% endmacro %}"
        "{% macro m2(p, q='dq') %}(m2 {{ p }}{{ q }}{% set a = 9 %}{{ a }}){% endmacro %}{% set a = 'A' %}")
ARTIFACTS = ('<generator', 'range(', 'dict_keys(', 'dict_values(', 'dict_items(', 'iterator object')


def check_engine(offkv, rng, n):
    env, bad, shown = hf_env(), 0, 0
    with tempfile.TemporaryDirectory() as d:
        for i in range(n):
            kind = rng.choice(['expr', 'stmt'])
            tpl = '{{ %s }}|{%% if %s %%}Y{%% endif %%}' % (expr(rng, 3), expr(rng, 2)) if kind == 'expr' \
                else HEAD + block(rng, 0, False) + '|{{ a }}{{ b }}{{ ns.c }}{{ x }}'
            try:
                want = {'rendered': env.from_string(tpl).render(messages=[], tools=None, documents=None,
                                                                add_generation_prompt=False, **VARS)}
            except Exception as e:
                want = {'error': str(e)}
            if 'rendered' in want and any(a in want['rendered'] for a in ARTIFACTS):
                continue
            cfg = os.path.join(d, 'cfg.json')
            json.dump({'chat_template': tpl}, open(cfg, 'w'))
            got = run_offkv(offkv, cfg, None, [{'messages': [], 'kwargs': VARS}])[0]
            if ('rendered' in want and got.get('rendered') != want['rendered']) or ('error' in want) != ('error' in got):
                bad += 1
                if shown < 5:
                    shown += 1
                    print('DIFF engine', tpl[:400])
                    print('  jinja2:', repr(want.get('rendered', want.get('error')))[:300])
                    print('  offkv: ', repr(got.get('rendered', got.get('error')))[:300])
    print('%-28s %5d cases, %d differ' % ('engine', n, bad))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--offkv', required=True, help='path to the offkv CLI')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--n', type=int, default=300, help='cases per suite')
    ap.add_argument('--only', choices=['conversations', 'engine'])
    a = ap.parse_args()
    rng = random.Random(a.seed)
    bad = 0
    if a.only != 'engine':
        bad += check_conversations(a.offkv, rng, a.n)
    if a.only != 'conversations':
        bad += check_engine(a.offkv, rng, a.n)
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
