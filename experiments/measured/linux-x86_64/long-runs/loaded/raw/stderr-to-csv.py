import csv, re, sys
# stderr rows of `burn-probes params --variant ema[-balanced]/N` -> the probe's CSV rows
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow("experiment,variant,phase,x,x_unit,metric,value,unit,note,platform,burn_version,probe".split(","))
for path in sys.argv[1:]:
    steps = re.search(r"(\d+)\.\d+\.err$|(\d+)\.err$", path)
    n = int(re.search(r"(\d{3,5})", path.split("/")[-1]).group(1))
    for line in open(path):
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) < 5 or not parts[3].startswith("ms_per_step"):
            continue
        x = int(parts[2].split()[0])
        value = parts[3].split("=")[1].split()[0]
        out.writerow([parts[0], f"detach/steps={n}", "", x, "step", "ms_per_step", value, "ms",
                      " | ".join(parts[4:]), "linux-x86_64", "0.22.1", "params"])
