"""Helper of bench/executor_vs_torch.sh: a pipewright-profile with free communication.

  executor_vs_torch_profile.py PROFILE OUT [TIMES]

Copies PROFILE (from `pipewright run --profile`) to OUT with no message time and no p2p batch
overhead, so that `pipewright simulate --profile OUT --p2p-ms 0` gives the plan's bubble bound.
With TIMES (bench/executor_vs_torch.py --times-out: "stage:F|B|I|W" and "rank:OPTIM" medians in
ms), each stage's compute times are torch's instead, its measured distributions dropped (the
medians are used), and the ranks' mean optimizer time is split evenly among a rank's stages.
"""
import json
import sys


def main() -> int:
    prof = json.load(open(sys.argv[1]))
    prof["comm_overhead_ms"] = 0.0
    prof.pop("p2p", None)
    if len(sys.argv) > 3:
        times = json.load(open(sys.argv[3]))
        field = {"F": "forward_ms", "B": "backward_ms", "I": "input_grad_ms", "W": "weight_grad_ms"}
        stages = prof["stages"]
        n = len(stages)
        pp = sum(1 for k in times if k.endswith(":OPTIM"))
        for i, st in enumerate(stages):
            st.pop("stats", None)
            for kind, name in field.items():
                if f"{i}:{kind}" in times:
                    st[name] = times[f"{i}:{kind}"]
            if f"{i}:B" not in times and f"{i}:I" in times and f"{i}:W" in times:
                st["backward_ms"] = times[f"{i}:I"] + times[f"{i}:W"]
            if pp:  # every rank holds n / pp stages; the ranks' optimizer steps differ little
                optim = [v for k, v in times.items() if k.endswith(":OPTIM")]
                st["optimizer_ms"] = sum(optim) / len(optim) / (n // pp)
        for key in ("step_correlation", "rank_step_correlation"):
            prof.pop(key, None)
    json.dump(prof, open(sys.argv[2], "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
