import Testing
@testable import GlucoseProfile
import TestSupport

/// Encode then decode generated values: every value the encoders build decodes to itself.
@Suite("Round trips over generated values")
struct RoundTripTests {
    static let count = 20_000

    @Test func measurements() throws {
        var g = Generator(rng: SplitMix(seed: 0x2A18))
        var failures: [String] = []
        for i in 0..<Self.count {
            let m = g.measurement()
            let bytes = m.encoded()
            do {
                let back = try GlucoseMeasurement(bytes: bytes)
                if back != m { failures.append("#\(i): \(m) -> \(back)") }
                if bytes.count != 10 + (m.timeOffset == nil ? 0 : 2) + (m.concentration == nil ? 0 : 3) + (m.sensorStatus == nil ? 0 : 2) {
                    failures.append("#\(i): length \(bytes.count)")
                }
            } catch {
                failures.append("#\(i): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(3))")
    }

    @Test func contexts() throws {
        var g = Generator(rng: SplitMix(seed: 0x2A34))
        var failures: [String] = []
        for i in 0..<Self.count {
            let c = g.context()
            do {
                let back = try GlucoseMeasurementContext(bytes: c.encoded())
                if back != c { failures.append("#\(i): \(c) -> \(back)") }
                if c.encoded().count > 17 { failures.append("#\(i): longer than 17 bytes") }
            } catch {
                failures.append("#\(i): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(3))")
    }

    @Test func racpAndFeatures() throws {
        var g = Generator(rng: SplitMix(seed: 0x2A52))
        var failures: [String] = []
        for i in 0..<Self.count {
            let request = g.request()
            let response = g.response()
            let features = GlucoseFeatures(rawValue: g.rng.uint16())
            do {
                if try RACPRequest(bytes: request.encoded()) != request { failures.append("#\(i): \(request)") }
                if try RACPResponse(bytes: response.encoded()) != response { failures.append("#\(i): \(response)") }
                if try GlucoseFeatures(bytes: features.encoded()) != features { failures.append("#\(i): \(features)") }
            } catch {
                failures.append("#\(i): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(3))")
    }

    @Test func dateTimesAndOffsets() throws {
        var g = Generator(rng: SplitMix(seed: 0x2A08))
        var failures = 0
        for _ in 0..<Self.count {
            let d = g.dateTime()
            if (try? GlucoseDateTime(bytes: d.encoded())) != d { failures += 1 }
            let minutes = Int(Int16(truncatingIfNeeded: g.rng.uint16()))
            let moved = d.adding(minutes: minutes)
            // Moving there and back returns to the start; the distance is exactly the offset.
            if moved.adding(minutes: -minutes) != d { failures += 1 }
            if moved.naiveSeconds - d.naiveSeconds != Int64(minutes) * 60 { failures += 1 }
            if moved.second != d.second { failures += 1 }
        }
        #expect(failures == 0)
    }

    @Test func sfloatEncoderRoundTrips() {
        var rng = SplitMix(seed: 0x11073)
        var failures = 0
        for _ in 0..<Self.count {
            let exponent = Int8(rng.below(16) - 8)
            let mantissa = rng.below(4091) - 2045
            let value = Double(mantissa) * pow10(Int(exponent))
            guard let encoded = SFloat(value, exponent: exponent) else { failures += 1; continue }
            if encoded != .value(mantissa: Int16(mantissa), exponent: exponent) { failures += 1 }
            if SFloat(bits: encoded.bits) != encoded { failures += 1 }
        }
        #expect(failures == 0)
    }

    private func pow10(_ e: Int) -> Double {
        var r = 1.0
        for _ in 0..<abs(e) { r *= 10 }
        return e < 0 ? 1 / r : r
    }
}
