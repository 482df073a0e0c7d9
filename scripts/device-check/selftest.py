#!/usr/bin/env python3
"""selftest.py: checks the device half's parsers and comparisons on canned inputs, since on a
machine without a GPU or RDMA they never see real output: ldd lines, library classes, perftest
tables, the loss-curve comparison and the top-k bound. Run by tests/device/test_device_check.sh;
prints one line per failed check and exits 1 if any failed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_common as dc  # noqa: E402
import run_gpu  # noqa: E402
import run_rdma  # noqa: E402

failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print(f"selftest: FAIL: {what}")


LDD = """\tlinux-vdso.so.1 (0x00007ffd)
\tlibcublas.so.13 => not found
\tlibz.so.1 => /p/lib/libz.so.1 (0x00007f)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f)
\t/x/plugin.so: /p/lib/compat/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by /x/plugin.so)
"""

WRITE_BW = """---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Device         : gvrxe0
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      21000            0.00               11.02                0.021012
---------------------------------------------------------------------------------------
"""

SEND_LAT = """ #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      2000          4.10           31.20        4.52               4.70           0.81            8.30                   25.00
---------------------------------------------------------------------------------------
"""


def curve(losses, acc=0.8, sps=1000.0, device="cpu"):
    return {"device": device, "rc": 0, "samples_per_s": sps,
            "steps": [{"step": 10 * (i + 1), "loss": v} for i, v in enumerate(losses)],
            "eval": {"loss": losses[-1], "accuracy": acc}}


def main():
    r = dc.parse_ldd(LDD)
    check(r["libs"] == {"libcublas.so.13": None, "libz.so.1": "/p/lib/libz.so.1"},
          f"parse_ldd libs: {r['libs']}")
    check(r["errors"] == ["/p/lib/compat/libstdc++.so.6: version GLIBCXX_3.4.32 not found "
                          "(required by /x/plugin.so)"],
          f"parse_ldd version errors: {r['errors']}")
    classes = {"libc.so.6": "base", "libpthread.so.0": "base", "ld-linux-x86-64.so.2": "base",
               "libcuda.so.1": "base", "libcublas.so.13": "device",
               "libcublasLt.so.12": "device", "libcudart.so.13": "cuda",
               "libstdc++.so.6": "compat", "libgcc_s.so.1": "compat", "libz.so.1": "lib",
               "libopenblas.so.0": "lib", "libcrypto.so.3": "lib"}
    for so, want in classes.items():
        check(dc.lib_class(so) == want, f"lib_class({so}) = {dc.lib_class(so)}, want {want}")

    bw = run_rdma.perftest_table(WRITE_BW)
    check(len(bw) == 1 and bw[0].get("BW average[Gb/sec]") == "11.02" and
          bw[0].get("#bytes") == "65536", f"ib_write_bw table: {bw}")
    lat = run_rdma.perftest_table(SEND_LAT)
    check(len(lat) == 1 and lat[0].get("t_typical[usec]") == "4.52" and
          lat[0].get("99.9% percentile[usec]") == "25.00", f"ib_send_lat table: {lat}")
    b = {"stream": {"results": [{"bytes": 65536, "gbps": 5.51}]}, "ib_write_bw": [
        {"rows": bw}], "pingpong": {"results": [{"bytes": 64, "lat_us": {"p50": 9.04}}]},
        "ib_send_lat": {"rows": lat}}
    lines = run_rdma.bench_lines(b)
    check(len(lines) == 2 and "(0.50x)" in lines[0] and "(2.00x)" in lines[1],
          f"rdma bench lines: {lines}")

    base = [2.3, 1.5, 1.0, 0.8, 0.7, 0.6]
    c = run_gpu.compare_curves(curve(base), curve(base, sps=4000.0, device="cuda"))
    check(c["ok"] and c["max_abs_diff"] == 0 and c["speedup"] == 4.0, f"equal curves: {c}")
    near = [v * (1 + 1e-4) for v in base]
    check(run_gpu.compare_curves(curve(base), curve(near))["ok"], "curves within 1e-4 refused")
    first = [base[0] + 0.01] + base[1:]
    c = run_gpu.compare_curves(curve(base), curve(first))
    check(not c["ok"] and not c["first_ok"], f"a first window 0.01 off passed: {c}")
    drift = base[:-2] + [v * 1.1 for v in base[-2:]]
    c = run_gpu.compare_curves(curve(base), curve(drift))
    check(not c["ok"] and not c["tail_ok"], f"a 10% drift of the last third passed: {c}")
    early = base[:1] + [base[1] * 1.002] + base[2:]
    c = run_gpu.compare_curves(curve(base), curve(early))
    check(not c["ok"] and c["first_ok"] and not c["head_ok"] and c["agree_to_step"] == 10,
          f"a second window 0.2% off passed: {c}")
    c = run_gpu.compare_curves(curve(base, acc=0.80), curve(base, acc=0.76))
    check(not c["ok"] and not c["acc_ok"], f"4 points of accuracy passed: {c}")
    # the MLP of the H100 check of 2026-11-27: within 1e-3 to step 160, then apart by rounding
    # amplified (one window 5.5 %, accuracy 1.8 points); the last third 0.6 % apart
    mlp_cpu = [1.99882, 1.13884, 0.83713, 0.76795, 0.65268, 0.56745, 0.66065, 0.52926, 0.55651,
               0.54952, 0.63905, 0.5306, 0.5682, 0.64369, 0.6044, 0.60268, 0.58006, 0.55367,
               0.5142, 0.51101, 0.57302, 0.56477, 0.56599, 0.4991, 0.43399, 0.50951, 0.54322,
               0.47954, 0.42899, 0.45573]
    mlp_gpu = mlp_cpu[:12] + [0.56817, 0.64417, 0.60471, 0.60193, 0.58208, 0.55735, 0.51537,
                              0.51915, 0.57951, 0.56388, 0.55974, 0.49732, 0.4329, 0.51856,
                              0.53581, 0.48586, 0.45278, 0.45915]
    ref = curve([v * 1.001 for v in mlp_cpu], acc=0.7739)
    c = run_gpu.compare_curves(curve(mlp_cpu, acc=0.781), curve(mlp_gpu, acc=0.763), ref)
    check(c["ok"] and c["agree_to_step"] == 160 and c["max_rel_diff"] > 0.05 and
          abs(c["ref_acc_diff"] - 0.0071) < 1e-9, f"the H100 MLP run refused: {c}")
    c = run_gpu.compare_curves(curve(base), curve(base[:3]))
    check(not c["ok"], "curves of different lengths passed")

    # 25 M floats at 3000 GB/s (read + write): one read of 100 MB takes 33.3 us
    gv = [{"what": "memcpy", "n": 25000000, "cf": 1, "k": 25000000, "time_ms": 0.08,
           "input_gbs": 1250.0},
          {"what": "topk", "n": 25000000, "cf": 1000, "k": 25000, "time_ms": 0.5,
           "input_gbs": 200.0}]
    torch = {"copy": {"gbs": 3000.0, "bytes": 1 << 30, "ms": 0.7},
             "rows": [{"n": 25000000, "cf": 1000.0, "k": 25000, "select_ms": 1.0,
                       "compressor_ms": 1.5}]}
    rows = run_gpu.topk_compare(gv, torch)
    r = rows[0] if rows else {}
    check(len(rows) == 1 and abs(r["bound_ms"] - 0.0333333) < 1e-6 and
          abs(r["x_bound"] - 15.0) < 1e-6 and r["speedup_vs_compressor"] == 3.0 and
          r["speedup_vs_select"] == 2.0, f"topk_compare: {rows}")
    r = run_gpu.topk_compare(gv, None)[0]       # without torch: the bench's own copy
    check(abs(r["copy_gbs"] - 2500.0) < 1e-6 and "torch_select_ms" not in r,
          f"topk_compare without torch: {r}")
    print(f"selftest: {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
