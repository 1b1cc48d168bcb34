"""pipewright-export on the examples in examples/byo (issue 21; /work/notes/i21-spec.md)."""
import json
import os
import re
import subprocess

import pytest
import torch

from conftest import REPO, load_example, run_cli
from pipewright_export import model_json, safetensors_io

COST_FIELDS = ("forward_ms", "backward_ms", "input_grad_ms", "weight_grad_ms", "param_bytes",
               "activation_bytes", "output_bytes")


def producers(model):
    return {(e["to"], e["to_input"]): (e["from"], e["from_output"]) for e in model["edges"]}


def test_prints_that_chained_nodes_reproduce_forward(exported):
    m = re.search(r"check: the exported nodes chained reproduce \w+\.forward: max \|diff\| "
                  r"(\S+) at micro batch 2, (\S+) at 3", exported.stdout)
    assert m, exported.stdout
    assert float(m.group(1)) <= 1e-6 and float(m.group(2)) <= 1e-6


def test_model_json_follows_the_spec(exported):
    model = exported.model
    module = load_example(exported.module)
    assert model["version"] == 1 and model["name"] == type(module).__name__
    assert model["micro_batch_size"] == 2
    assert model["input"] == {"dtype": "int64", "shape": [16]}
    assert model["source"]["module"] == exported.module
    assert model["source"]["init"] == "init.safetensors"
    assert model["source"]["torch"] == torch.__version__  # the torch that wrote the node files
    names = [n["name"] for n in model["nodes"]]
    assert len(names) == len(set(names)) and len(names) >= 4  # 4 stages: pp 2 x 2 per rank
    state = module.state_dict()
    params = {f"{mn}.{pn}" if mn else pn: p  # every name, tied ones too (torch 1.13)
              for mn, mod in module.named_modules(remove_duplicate=False)
              for pn, p in mod._parameters.items() if p is not None}
    listed = set()
    for n in model["nodes"]:
        assert n["kind"] == "torchscript"
        s = n["script"]
        assert s["file"] == f"nodes/{names.index(n['name']):03d}_{n['name']}.pt"
        loaded = torch.jit.load(os.path.join(exported.dir, s["file"]))
        assert [p["name"] for p in s["parameters"]] == [k for k, _ in loaded.named_parameters()]
        assert [b["name"] for b in s["buffers"]] == [k for k, _ in loaded.named_buffers()]
        for p in s["parameters"]:
            assert p["name"] in params and list(params[p["name"]].shape) == p["shape"]
            assert p["dtype"] == "float32"
            listed.add(p["name"])
        for b in s["buffers"]:
            assert b["persistent"] == (b["name"] in state)
        for io_ in s["inputs"] + s["outputs"]:
            assert io_["dtype"] in ("float32", "int64") and all(d >= 1 for d in io_["shape"])
    assert listed == set(params)  # every parameter, under every name, in some node
    prod = producers(model)
    assert len(prod) == len(model["edges"])  # one producer per input slot
    for (to, j), (frm, k) in prod.items():
        assert names.index(frm) < names.index(to)  # node order is topological
        assert j < len(model["nodes"][names.index(to)]["script"]["inputs"])
        assert k < len(model["nodes"][names.index(frm)]["script"]["outputs"])
    for n in model["nodes"]:  # an input slot nobody produces reads the model input
        for j, inp in enumerate(n["script"]["inputs"]):
            if (n["name"], j) not in prod:
                assert {k: inp[k] for k in ("dtype", "shape")} == model["input"]
    sinks = [x for x in names if all(e["from"] != x for e in model["edges"])]
    assert sinks == [names[-1]]
    final = model["nodes"][-1]["script"]["outputs"][0]
    assert final == {"name": final["name"], "dtype": "float32", "shape": [16, 64]}


def test_report_has_each_nodes_spread_and_the_measuring_conditions(exported):
    rows = {line.split()[0]: line.split() for line in exported.stdout.splitlines()}
    assert rows["node"][:5] == ["node", "fwd", "ms", "spread", "bwd"]
    for n in exported.model["nodes"]:
        row = rows[n["name"]]
        assert re.fullmatch(r"\d+%", row[2]) and re.fullmatch(r"\d+%", row[4]), row
    assert re.search(r"^costs: torch \d+\.\d+\.\d+, \d+ threads? \(OMP_NUM_THREADS",
                     exported.stdout, re.M)


def test_every_node_carries_measured_costs(exported):
    for n in exported.model["nodes"]:
        c = n["cost"]
        assert set(c) == set(COST_FIELDS)
        assert all(c[f] >= 0 for f in COST_FIELDS)
        assert c["forward_ms"] > 0 and c["backward_ms"] > 0 and c["output_bytes"] > 0
        assert abs(c["input_grad_ms"] + c["weight_grad_ms"] - c["backward_ms"]) <= \
            1e-6 * max(1.0, c["backward_ms"])
        held = sum(4 * int(torch.Size(p["shape"]).numel()) for p in n["script"]["parameters"])
        assert c["param_bytes"] == held
        if not any(i["dtype"] == "float32" for i in n["script"]["inputs"]):
            assert c["input_grad_ms"] == 0  # an embedding: no input gradient


def test_gpt2_lm_head_is_tied_to_the_token_embedding(gpt2):
    entries = {(n["name"], p["name"]): p for n in gpt2.model["nodes"]
               for p in n["script"]["parameters"]}
    assert entries[("lm_head", "lm_head.weight")]["tied_to"] == "transformer.wte.weight"
    assert "tied_to" not in entries[("transformer.wte", "transformer.wte.weight")]
    assert sum("tied_to" in p for p in entries.values()) == 1


def test_llama_rope_buffer_is_replicated_into_every_layer(llama):
    for n in llama.model["nodes"]:
        buffers = n["script"]["buffers"]
        if n["name"].startswith("layers."):
            assert buffers == [{"name": "freqs_cis", "dtype": "float32", "shape": [32, 4, 2],
                                "persistent": False}]
            assert len(n["script"]["inputs"]) == 1  # h only: the table is never sent
        else:
            assert buffers == []


def test_skipnet_has_the_skip_edge_and_a_two_output_node(skipnet):
    edges = {(e["from"], e["from_output"], e["to"], e["to_input"])
             for e in skipnet.model["edges"]}
    assert ("blocks.0", 0, "blocks.2", 1) in edges  # the skip over blocks.1, fork and mix
    assert ("fork", 0, "mix", 0) in edges and ("fork", 1, "head", 1) in edges
    fork = next(n for n in skipnet.model["nodes"] if n["name"] == "fork")
    assert [o["name"] for o in fork["script"]["outputs"]] == ["out0", "out1"]


def test_init_safetensors_loads_strictly_into_the_module(exported):
    st = pytest.importorskip("safetensors.torch")
    path = os.path.join(exported.dir, "init.safetensors")
    fresh = load_example(exported.module)
    expected = fresh.state_dict()
    for p in fresh.parameters():
        p.data.fill_(0.5)
    fresh.load_state_dict(st.load_file(path), strict=True)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, expected[k]), k
    assert safetensors_io.load_file(path).keys() == expected.keys()


def test_nodes_chained_by_the_edges_reproduce_forward(exported):
    """The executor's view: only model.json and the .pt files."""
    from pipeline_emulator import ExportedModel
    model = ExportedModel(os.path.join(exported.dir, "model.json"))
    module = load_example(exported.module)
    x = torch.randint(0, 64, (5, 16), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        diff = (model.forward([x]) - module(x)).abs().max().item()
    assert diff <= 1e-6


def test_exported_nodes_train_like_the_module(exported, tmp_path):
    """GPipe-style microbatches over the exported nodes (tied gradients summed) end with the
    weights of plain PyTorch training: the contract the executor implements."""
    import pipeline_emulator
    import torch_reference
    st = pytest.importorskip("safetensors.torch")
    module = load_example(exported.module)
    torch_reference.write_data(module, 16, 32, 0, str(tmp_path))
    import numpy as np
    x = torch.from_numpy(np.load(tmp_path / "x.npy"))
    y = torch.from_numpy(np.load(tmp_path / "y.npy"))
    model = pipeline_emulator.ExportedModel(os.path.join(exported.dir, "model.json"))
    pipeline_emulator.train(model, x, y, batch_size=8, microbatches=4, steps=3, lr=0.1)
    module.load_state_dict(st.load_file(os.path.join(exported.dir, "init.safetensors")))
    torch_reference.train(module, x, y, batch_size=8, steps=3, lr=0.1)
    diff, key = torch_reference.compare(module, model.state_dict(),
                                        os.path.join(REPO, exported.module))
    assert diff <= 2e-5, key


BAD = "tests/python/data/bad_models.py"
GPT2 = ["--module", "examples/byo/gpt2.py:tiny_gpt2", "--input-dtype", "int64"]


@pytest.mark.parametrize("argv,message", [
    (["--module", f"{BAD}:data_dependent", "--input-shape", "8"],
     r"cannot capture DataDependent\.forward with torch\.fx: data-dependent control flow at "
     r"tests/python/data/bad_models\.py:17 \(`if h\.sum\(\) > 0:`\).*'gt'.*--leaf-modules"),
    (["--module", f"{BAD}:untraceable_child", "--input-shape", "8"],
     r"node 'gate' \(module Gate\): torch\.jit\.script failed .* torch\.jit\.trace would "
     r"freeze a run-time value at .*bad_models\.py:\d+ \(`if x\.mean\(\) > 0:`\)"),
    (["--module", f"{BAD}:raises", "--input-shape", "8"],
     r"bad_models\.py:raises\(\) raised ValueError: hidden size 30 is not divisible by 4 heads$"),
    (["--module", f"{BAD}:not_a_module", "--input-shape", "8"], r"returned int, not a torch"),
    (["--module", f"{BAD}:returns_dict", "--input-shape", "8"],
     r"forward must return one tensor \(the prediction\), not a dict"),
    (GPT2 + ["--input-shape", "32"],
     r"GPT\.forward fails on input\(s\) of shape \[1, 32\] int64 .*: RuntimeError: The size of "
     r"tensor a \(32\) must match the size of tensor b \(16\)"),
    (["--module", "examples/byo/gpt2.py", "--input-shape", "16"],
     r"--module: expected FILE\.py:FACTORY, got 'examples/byo/gpt2\.py'"),
    (["--module", "examples/byo/nothere.py:f", "--input-shape", "16"],
     r"--module: examples/byo/nothere\.py: no such file"),
    (["--module", "examples/byo/gpt2.py:nothere", "--input-shape", "16"],
     r"has no function 'nothere'"),
    (GPT2 + ["--input-shape", "16x2"], r"--input-shape: expected sizes >= 1"),
    (GPT2 + ["--input-shape", "16", "--leaf-modules", "nope"], r"no submodule .* named 'nope'"),
])
def test_bad_input_exits_2_with_one_line(argv, message, tmp_path):
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        code, out, err = run_cli(argv + ["-o", str(tmp_path)])
    finally:
        os.chdir(cwd)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("pipewright-export: error: "), err
    assert re.search(message, err.strip()), err


def test_scriptable_data_dependent_child_is_one_opaque_node(tmp_path):
    code, out, err = run_cli(["--module", os.path.join(REPO, BAD) + ":scriptable_branch",
                              "--input-shape", "8", "-o", str(tmp_path)])
    assert code == 0, err
    assert "3 nodes (3 torch.jit.script" in out


def test_sequential_is_cut_unless_named_in_leaf_modules(tmp_path):
    spec = os.path.join(REPO, "tests/python/data/small_models.py") + ":seqnet"
    for extra, nodes in (([], ["body.0", "body.1", "body.2", "head"]),
                         (["--leaf-modules", "body"], ["body", "head"])):
        code, _, err = run_cli(["--module", spec, "--input-shape", "8", "-o", str(tmp_path)]
                               + extra)
        assert code == 0, err
        model = json.loads((tmp_path / "model.json").read_text())
        assert [n["name"] for n in model["nodes"]] == nodes
        assert sorted(os.listdir(tmp_path / "nodes")) == sorted(
            n["script"]["file"][len("nodes/"):] for n in model["nodes"])


def test_several_inputs(tmp_path):
    spec = os.path.join(REPO, "tests/python/data/small_models.py") + ":two_inputs"
    code, _, err = run_cli(["--module", spec, "--input-shape", "8", "--input-shape", "8",
                            "-o", str(tmp_path)])
    assert code == 0, err
    model = json.loads((tmp_path / "model.json").read_text())
    assert [i["name"] for i in model["inputs"]] == ["x", "mask"]
    assert model["nodes"][1]["script"]["inputs"][1]["model_input"] == 1


def test_the_executable(tmp_path):
    exe = os.path.join(REPO, "tools", "pipewright-export")
    help_ = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert help_.returncode == 0 and "--micro-batch-size" in help_.stdout
    bad = subprocess.run([exe, "--module", "nothere.py:f", "--input-shape", "4", "-o",
                          str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr == "pipewright-export: error: --module: nothere.py: no such file\n"


def test_traced_node_with_dropout_and_batchnorm_keeps_the_initial_buffers(tmp_path):
    spec = os.path.join(REPO, "tests/python/data/small_models.py") + ":traced_batchnorm"
    code, out, err = run_cli(["--module", spec, "--input-shape", "8", "-b", "4",
                              "-o", str(tmp_path)])
    assert code == 0, err
    assert "2 nodes (1 torch.jit.script, 1 torch.jit.trace)" in out
    a = torch.jit.load(str(tmp_path / "nodes" / "000_a.pt"))
    buffers = dict(a.named_buffers())
    assert torch.equal(buffers["a.bn.running_mean"], torch.zeros(8))
    assert int(buffers["a.bn.num_batches_tracked"]) == 0
    init = safetensors_io.load_file(str(tmp_path / "init.safetensors"))
    assert torch.equal(init["a.bn.running_var"], torch.ones(8))


def test_a_module_called_twice_and_a_parameter_read_by_glue_twice_train_as_one(tmp_path):
    import pipeline_emulator
    import torch_reference
    spec = os.path.join(REPO, "tests/python/data/small_models.py") + ":reused"
    code, _, err = run_cli(["--module", spec, "--input-shape", "8", "-b", "2",
                            "-o", str(tmp_path)])
    assert code == 0, err
    model = json.loads((tmp_path / "model.json").read_text())
    assert [n["name"] for n in model["nodes"]] == ["emb", "block", "block#2", "head"]
    entries = [(n["name"], p["name"], p.get("tied_to")) for n in model["nodes"]
               for p in n["script"]["parameters"]]
    assert ("block", "scale", None) in entries and ("head", "scale", "scale") in entries
    assert ("block#2", "block.weight", "block.weight") in entries
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 8, generator=g)
    y = torch.randint(0, 4, (16,), generator=g)
    exported = pipeline_emulator.ExportedModel(str(tmp_path / "model.json"))
    pipeline_emulator.train(exported, x, y, batch_size=8, microbatches=4, steps=2, lr=0.1)
    module = load_example("tests/python/data/small_models.py:reused")
    torch_reference.train(module, x, y, batch_size=8, steps=2, lr=0.1)
    diff, key = torch_reference.compare(module, exported.state_dict(), spec)
    assert diff <= 1e-6, key


def test_output_that_is_a_file_exits_2(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    code, _, err = run_cli(["--module", os.path.join(REPO, "tests/python/data/small_models.py")
                            + ":seqnet", "--input-shape", "8", "-o", str(target)])
    assert code == 2 and err.startswith(f"pipewright-export: error: -o {target}: Not a directory")


def test_torch_reference_cli(gpt2, tmp_path, capsys):
    pytest.importorskip("safetensors")
    import numpy as np
    import torch_reference
    spec = os.path.join(REPO, gpt2.module)
    assert torch_reference.main(["data", "--module", spec, "--input-shape", "16", "--rows", "16",
                                 "-o", str(tmp_path)]) == 0
    x, y = np.load(tmp_path / "x.npy"), np.load(tmp_path / "y.npy")
    assert x.shape == y.shape == (16, 16) and x.dtype == np.int64
    assert (x[:, 1:] == y[:, :-1]).all() and x.max() < 64
    train = ["train", "--module", spec, "--init", os.path.join(gpt2.dir, "init.safetensors"),
             "--data-x", str(tmp_path / "x.npy"), "--data-y", str(tmp_path / "y.npy"),
             "--batch-size", "8", "--steps", "2", "--lr", "0.1"]
    assert torch_reference.main(train + ["--save", str(tmp_path / "ref.safetensors")]) == 0
    assert torch_reference.main(train + ["--compare", str(tmp_path / "ref.safetensors")]) == 0
    assert "max |pipewright - torch| = 0 " in capsys.readouterr().out
    # Untrained weights are not the trained ones: exit 1.
    assert torch_reference.main(
        train + ["--compare", os.path.join(gpt2.dir, "init.safetensors")]) == 1
