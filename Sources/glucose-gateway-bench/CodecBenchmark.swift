#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import GlucoseProfile
import Support

/// `codec`: Glucose Measurement (0x2A18) decodes per second on one thread, over a mix of values as meters
/// send them (full 17-byte records, HI and LO, mol/L, minimal records). Prints the best and median of
/// several runs; a checksum over the decoded fields keeps the work from being optimised away. Rates are
/// given per second of wall time and per second of this thread's CPU time (the second is the one-core
/// figure when other processes share the machine).
enum CodecBenchmark {
    static let usage = """
        usage: glucose-gateway-bench codec [--count N] [--runs N]
          --count   decodes per run (default 20000000)
          --runs    runs (default 5); best and median are printed

        """

    /// Captured and specification-derived values: Accu-Chek style (offset, kg/L, 0xF8, status), HI and LO,
    /// Contour style (UTC base time, offset -420), mol/L, minimal and context-follows records.
    static let samples: [[UInt8]] = [
        [0x0B, 0x04, 0x00, 0xE5, 0x07, 0x0B, 0x0E, 0x0A, 0x14, 0x1E, 0x3C, 0x00, 0x6F, 0xB0, 0xF8, 0x00, 0x00],
        [0x0B, 0x06, 0x00, 0xE5, 0x07, 0x0B, 0x0E, 0x0A, 0x14, 0x1E, 0x3C, 0x00, 0x02, 0x08, 0xF8, 0x40, 0x00],
        [0x0B, 0x05, 0x00, 0xE8, 0x07, 0x03, 0x05, 0x0E, 0x1E, 0x00, 0x00, 0x00, 0xFE, 0x07, 0xF8, 0x20, 0x00],
        [0x13, 0x2D, 0x00, 0xE8, 0x07, 0x01, 0x01, 0x03, 0x00, 0x00, 0x5C, 0xFE, 0x7C, 0xB0, 0x11],
        [0x07, 0x10, 0x01, 0xE8, 0x07, 0x02, 0x1D, 0x17, 0x3B, 0x3B, 0x53, 0x01, 0x37, 0xC0, 0x12],
        [0x00, 0xFF, 0xFF, 0xE4, 0x07, 0x05, 0x15, 0x0A, 0x1E, 0x2D],
        [0x1B, 0x01, 0x00, 0xE3, 0x07, 0x02, 0x1B, 0x0B, 0x0A, 0x1E, 0xFB, 0xFF, 0x1E, 0x00, 0x12, 0x05, 0x01],
        [0x03, 0x34, 0x12, 0xE8, 0x07, 0x0C, 0x1F, 0x17, 0x3B, 0x00, 0x3C, 0x00, 0xB4, 0xB0, 0x11],
    ]

    static func run(_ arguments: [String]) -> Int32 {
        var count = 20_000_000
        var runs = 5
        var rest = arguments[...]
        while let name = rest.popFirst() {
            guard let text = rest.popFirst(), let value = Int(text), value > 0 else {
                StandardStream.writeError(usage)
                return 64
            }
            switch name {
            case "--count": count = value
            case "--runs": runs = value
            default:
                StandardStream.writeError(usage)
                return 64
            }
        }
        // Every sample must decode, or the figure would measure the error path.
        for sample in samples where (try? GlucoseMeasurement(bytes: sample)) == nil {
            StandardStream.writeError("codec: a benchmark sample does not decode\n")
            return 1
        }

        var decode = Rates()
        var full = Rates()
        var checksum = 0
        for _ in 0..<runs {
            let (d, sum1) = measure(count: count, full: false)
            let (f, sum2) = measure(count: count, full: true)
            checksum &+= sum1 &+ sum2
            decode.add(count: count, d)
            full.add(count: count, f)
        }
        StandardStream.writeOutput(
            "codec: \(count) decodes x \(runs) runs, one thread, million per second (best / median)\n"
                + "codec: 0x2A18 decode                            wall \(decode.wall)   cpu \(decode.cpu)\n"
                + "codec: 0x2A18 decode + user-facing time + mg/dL wall \(full.wall)   cpu \(full.cpu)\n"
                + "codec: checksum \(checksum)\n"
        )
        return 0
    }

    struct Rates {
        var wallRates: [Double] = []
        var cpuRates: [Double] = []
        mutating func add(count: Int, _ t: (wall: Double, cpu: Double)) {
            wallRates.append(Double(count) / t.wall)
            cpuRates.append(Double(count) / max(t.cpu, 1e-9))
        }
        var wall: String { summary(wallRates) }
        var cpu: String { summary(cpuRates) }
        func summary(_ rates: [Double]) -> String {
            let sorted = rates.sorted()
            guard let best = sorted.last else { return "-" }
            return "\(millions(best)) / \(millions(sorted[sorted.count / 2]))"
        }
    }

    static func threadCPUSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Wall and CPU seconds for `count` decodes, and a checksum of what was decoded.
    static func measure(count: Int, full: Bool) -> ((wall: Double, cpu: Double), Int) {
        let inputs = samples
        var checksum = 0
        let clock = ContinuousClock()
        let start = clock.now
        let cpuStart = threadCPUSeconds()
        for i in 0..<count {
            let input = inputs[i & 7]
            switch GlucoseMeasurement.decode(input) {
            case let .success(m):
                checksum &+= Int(m.sequenceNumber) &+ m.baseTime.minute
                if full {
                    checksum &+= m.userFacingTime.hour
                    if let mg = m.mgPerDL { checksum &+= Int(mg) }
                }
            case .failure:
                checksum &-= 1
            }
        }
        let cpu = threadCPUSeconds() - cpuStart
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return ((seconds, cpu), checksum)
    }

    static func millions(_ rate: Double) -> String {
        let tenths = Int((rate / 100_000).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
}
