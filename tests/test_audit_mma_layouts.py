"""benchmarks/audit_mma_layouts.py: the replication it reports for a dot's MMA layout.

Why: a 32x32 tile at 8 warps laid out as warpsPerCTA [8, 1] (four warps a row) gave wrong
bfloat16 WINOGRAD results on an H100; the audit must flag that layout and pass the ones
whose warps each hold distinct accumulator tiles."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import audit_mma_layouts as audit  # noqa: E402


def _ttgir(tile, version, warps_per_cta, instr, num_warps):
    m, n = tile
    return (f"#mma = #ttg.nvidia_mma<{{versionMajor = {version}, versionMinor = 0, warpsPerCTA = "
            f"[{', '.join(map(str, warps_per_cta))}], instrShape = [{', '.join(map(str, instr))}]}}>\n"
            f'module attributes {{"ttg.num-warps" = {num_warps} : i32}} {{\n'
            f"  tt.func public @kern(%a: i32) {{\n"
            f"    %d = tt.dot %x, %y, %z : tensor<{m}x32xbf16, #a> * tensor<32x{n}xbf16, #b> "
            f"-> tensor<{m}x{n}xf32, #mma> loc(#loc1)\n  }}\n}}\n")


def test_flags_four_warps_a_row():
    name, warps, dots = audit.audit(_ttgir((32, 32), 2, (8, 1), (16, 8), 8))
    assert (name, warps) == ("kern", 8)
    assert [d[-1] for d in dots] == [4]


def test_distinct_tiles_are_not_replicated():
    assert [d[-1] for d in audit.audit(_ttgir((32, 64), 2, (1, 8), (16, 8), 8))[2]] == [1]
    assert [d[-1] for d in audit.audit(_ttgir((64, 32), 3, (4, 2), (16, 16, 16), 8))[2]] == [1]
    assert [d[-1] for d in audit.audit(_ttgir((32, 32), 2, (4, 1), (16, 8), 4))[2]] == [2]


def test_main_reads_a_cache(tmp_path, capsys):
    (tmp_path / "k1").mkdir()
    (tmp_path / "k1" / "kern.ttgir").write_text(_ttgir((32, 32), 2, (8, 1), (16, 8), 8))
    (tmp_path / "k2").mkdir()
    (tmp_path / "k2" / "kern.ttgir").write_text(_ttgir((32, 64), 2, (1, 8), (16, 8), 8))
    assert audit.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "x4" in out and "1 dot layouts replicated 2x or more in 2 compiled kernels" in out
