"""The programs compiled by bcc against this kernel and loaded through the verifier (needs root and bcc)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocescope.collectors.ebpf.collector import QP_KPROBES
from rocescope.collectors.ebpf.loader import kprobes_unavailable, program_text


def test_qp_kprobe_program_compiles_and_passes_the_verifier(bcc: Any) -> None:
    prog = bcc.BPF(text=program_text("qp_owner.c").encode())
    try:
        for _, _, fn_name in QP_KPROBES:
            assert prog.load_func(fn_name.encode(), bcc.BPF.KPROBE).fd >= 0
        why = kprobes_unavailable()
        if why is None and "ib_create_qp_user" in Path("/proc/kallsyms").read_text():
            for kind, function, fn_name in QP_KPROBES:  # this kernel can: attach for real
                attach = prog.attach_kretprobe if kind == "kretprobe" else prog.attach_kprobe
                attach(event=function.encode(), fn_name=fn_name.encode())
    finally:
        prog.cleanup()
