// Benchmarks: run in release, `swift run -c release glucose-gateway-bench --help`.
print("usage: glucose-gateway-bench NAME")
