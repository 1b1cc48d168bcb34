"""`pipewright-export`: argument parsing, messages and exit codes (library code raises)."""
import argparse
import sys
from typing import TYPE_CHECKING, List, NoReturn, Optional, Sequence

from . import __version__
from .inputs import DTYPE_CHOICES, InputSpec

if TYPE_CHECKING:
    from .export import Result
from .errors import ExportError

PROG = "pipewright-export"


class _Parser(argparse.ArgumentParser):
    """argparse with the C++ CLI's (CLI11's) help layout and one-line errors."""

    def error(self, message: str) -> NoReturn:  # one line, exit 2, like the C++ CLI
        sys.stderr.write(f"{PROG}: error: {message}\n")
        sys.exit(2)

    def format_help(self) -> str:
        lines = [self.description or "", f"Usage: {self.prog} [OPTIONS]", "", "Options:"]
        for a in self._actions:
            flags = ",".join(sorted(a.option_strings, key=lambda f: (f.startswith("--"), f)))
            if a.nargs == 0:
                left = flags
            else:
                kind = "INT" if a.type is int else "TEXT"
                if a.choices:
                    kind += ":{" + ",".join(a.choices) + "}"
                default = "" if a.default in (None, [], "") or a.required else f"={a.default}"
                left = f"{flags} {kind}{' ...' if isinstance(a, argparse._AppendAction) else ''}{default}"
                left += " REQUIRED" if a.required else ""
            text = a.help or ""
            if len(left) <= 27:
                lines.append(f"  {left:<27} {text}")
            else:
                lines += [f"  {left}", f"  {'':<27} {text}"]
        return "\n".join(lines) + "\n"


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, add_help=False,
        description="Export a PyTorch nn.Module as a pipewright model: one TorchScript node per "
        "module its forward calls, with measured costs (docs/your-own-model.md)")
    p.add_argument("-h", "--help", action="help", help="Print this help message and exit")
    p.add_argument("--module", required=True, metavar="FILE.py:FACTORY",
                   help="FILE.py:FACTORY, a zero-argument function returning the nn.Module")
    p.add_argument("--input-shape", action="append", required=True, metavar="SHAPE",
                   help="per-sample input shape, e.g. 16 or 3,32,32 (repeat for several inputs)")
    p.add_argument("--input-dtype", action="append", default=[], metavar="DTYPE",
                   choices=DTYPE_CHOICES,
                   help="input element type, one per --input-shape (default: float32; int64 = "
                   "token ids)")
    p.add_argument("--micro-batch-size", "-b", type=int, default=1, metavar="B",
                   help="micro batch the costs are measured at")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="output folder: model.json, nodes/*.pt, init.safetensors")
    p.add_argument("--leaf-modules", default="", metavar="A,B",
                   help="submodules (qualified names or class names) to keep as one opaque "
                   "node each")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random batches of the check and the costs")
    p.add_argument("--version", action="version", version=f"pipewright-export {__version__}",
                   help="Display program version information and exit")
    return p


def parse_shape(text: str) -> tuple:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise ExportError(f"--input-shape: expected sizes >= 1 separated by commas, e.g. 16 or "
                          f"3,32,32, got '{text}'")
    return dims


def input_specs(shapes: Sequence[str], dtypes: Sequence[str]) -> List[InputSpec]:
    if len(dtypes) > len(shapes):
        raise ExportError(f"--input-dtype given {len(dtypes)} times but --input-shape "
                          f"{len(shapes)} times")
    return [InputSpec(parse_shape(s), dtypes[i] if i < len(dtypes) else "float32")
            for i, s in enumerate(shapes)]


def _percent(spread: float) -> str:
    return f"{100 * spread:.0f}%"


def print_report(r: "Result", micro_batch: int, output_dir: str) -> None:
    from .model_json import torch_version
    from .timing import MAX_ROUNDS, MAX_SPREAD, MIN_ROUNDS
    scripted = r.methods.count("script")
    print(f"{r.model_name}: {len(r.node_names)} nodes ({scripted} torch.jit.script, "
          f"{len(r.methods) - scripted} torch.jit.trace), {r.edges} edges")
    print(f"check: the exported nodes chained reproduce {r.model_name}.forward: max |diff| "
          f"{r.max_abs_diff:.3g} at micro batch {micro_batch}, "
          f"{r.max_abs_diff_other_batch:.3g} at {micro_batch + 1} (<= 1e-06)")
    print(f"{'node':<24} {'fwd ms':>8} {'spread':>6} {'bwd ms':>8} {'spread':>6} {'in ms':>8} "
          f"{'w ms':>8} {'params B':>10} {'act B':>10} {'out B':>10}")
    for n, m in zip(r.model["nodes"], r.costs):
        c = n["cost"]
        print(f"{n['name']:<24} {c['forward_ms']:>8.3f} {_percent(m.forward_spread):>6} "
              f"{c['backward_ms']:>8.3f} {_percent(m.backward_spread):>6} "
              f"{c['input_grad_ms']:>8.3f} {c['weight_grad_ms']:>8.3f} {c['param_bytes']:>10} "
              f"{c['activation_bytes']:>10} {c['output_bytes']:>10}")
    threads = f"{r.threads} thread{'s' if r.threads > 1 else ''}"
    print(f"costs: torch {torch_version()}, {threads} (OMP_NUM_THREADS, default 1 as in "
          f"pipewright launch), graph executor optimisations off as in pipewright run")
    print(f"spread: (max - min) / median of the runs of the kept round (the fastest calm one of "
          f"{MIN_ROUNDS}; up to {MAX_ROUNDS} while none spreads {_percent(MAX_SPREAD)} or less)")
    unsettled = [f"{n} {k[:1]}wd" for n, m in zip(r.node_names, r.costs) for k in m.unsettled]
    if unsettled:
        print(f"still spread over {_percent(MAX_SPREAD)} after {MAX_ROUNDS} rounds (a busy "
              f"machine?): {', '.join(unsettled)}")
    print(f"wrote {output_dir}/model.json, {len(r.node_names)} nodes/*.pt, "
          f"init.safetensors ({r.state_dict_keys} tensors) in {r.seconds:.1f} s")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = make_parser().parse_args(argv)
    # Imported here so that --help and flag errors do not wait for torch.
    from .export import Options, run
    try:
        if args.micro_batch_size < 1:
            raise ExportError(f"--micro-batch-size must be >= 1, got {args.micro_batch_size}")
        opts = Options(module=args.module, inputs=input_specs(args.input_shape, args.input_dtype),
                       micro_batch_size=args.micro_batch_size, output_dir=args.output,
                       leaf_modules=[s for s in args.leaf_modules.split(",") if s],
                       seed=args.seed)
        r = run(opts)
    except ExportError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return e.exit_code
    print_report(r, opts.micro_batch_size, opts.output_dir)
    return 0
