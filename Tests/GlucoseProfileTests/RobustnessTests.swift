import Testing
@testable import GlucoseProfile
import TestSupport

/// Feeds 1,000,000 random and mutated byte strings to every decoder. Each must give a value or a typed
/// error with a one-line description, a field name and an offset inside the input; a decoded value must
/// re-encode to bytes that decode to the same value. Deterministic (SplitMix64, fixed seed).
@Suite("Robustness: random and mutated input")
struct RobustnessTests {
    static let inputs = 1_000_000
    /// Four shards with their own seeds, run in parallel.
    static let shards = 4

    struct Tally {
        var values = 0
        var errors = 0
        var problems: [String] = []

        mutating func error(_ e: GlucoseDecodingError, _ input: [UInt8], _ decoder: StaticString) {
            errors += 1
            if e.offset < 0 || e.offset > input.count { problem("\(decoder) offset \(e.offset) for \(input)") }
            // Rendering text is the slow part in a debug build: check one error in eight.
            if errors & 7 == 0 {
                let d = e.description
                if e.field.isEmpty || e.detail.isEmpty || d.isEmpty || d.contains("\n") || !d.hasPrefix(e.field) {
                    problem("\(decoder) bad error \(d) for \(input)")
                }
            }
        }

        mutating func problem(_ text: String) {
            if problems.count < 5 { problems.append(text) }
        }
    }

    @Test(arguments: 0..<shards)
    func everyDecoderGivesAValueOrATypedError(shard: Int) {
        var g = Generator(rng: SplitMix(seed: 0x5EED_2A18 &+ UInt64(shard)))
        var tally = Tally()
        var input: [UInt8] = []
        input.reserveCapacity(32)
        let count = Self.inputs / Self.shards
        for i in 0..<count {
            makeInput(&input, iteration: i, &g)
            feed(input, &tally, iteration: i)
        }
        #expect(tally.problems.isEmpty, "\(tally.problems)")
        #expect(tally.values + tally.errors == count * 6)
        // Both outcomes occur in quantity, so the mix exercises decoding, not only the first length check.
        #expect(tally.values > count / 2)
        #expect(tally.errors > count / 2)
    }

    /// Half purely random (length 0...24), half a valid encoding with one to four mutations.
    func makeInput(_ input: inout [UInt8], iteration: Int, _ g: inout Generator) {
        input.removeAll(keepingCapacity: true)
        if iteration % 2 == 0 {
            let length = g.rng.below(25)
            for _ in 0..<length { input.append(g.rng.byte()) }
            return
        }
        switch g.rng.below(5) {
        case 0: input.append(contentsOf: g.measurement().encoded())
        case 1: input.append(contentsOf: g.context().encoded())
        case 2: input.append(contentsOf: g.request().encoded())
        case 3: input.append(contentsOf: g.response().encoded())
        default: input.append(contentsOf: g.dateTime().encoded())
        }
        for _ in 0...g.rng.below(4) {
            switch g.rng.below(6) {
            case 0 where !input.isEmpty: // flip one bit
                input[g.rng.below(input.count)] ^= 1 << UInt8(g.rng.below(8))
            case 1 where !input.isEmpty: // replace the flags / op code byte
                input[0] = g.rng.byte()
            case 2 where !input.isEmpty: // truncate
                input.removeLast(g.rng.below(input.count) + 1)
            case 3: // extend
                for _ in 0..<(1 + g.rng.below(4)) { input.append(g.rng.byte()) }
            case 4 where !input.isEmpty: // overwrite a byte with an edge value
                let edges: [UInt8] = [0x00, 0xFF, 0x7F, 0x80, 0x0D, 0x1D, 0x3C, 0x18]
                input[g.rng.below(input.count)] = edges[g.rng.below(edges.count)]
            default: // drop a byte from the middle
                if !input.isEmpty { input.remove(at: g.rng.below(input.count)) }
            }
        }
    }

    /// Every decoder, through its non-throwing entry point (throwing costs a backtrace per error under the
    /// test runner); one input in 64 also goes through the throwing initialisers, which must agree.
    func feed(_ input: [UInt8], _ t: inout Tally, iteration: Int) {
        check(GlucoseMeasurement.decode(input), input, &t, "0x2A18") { m in
            _ = m.userFacingTime
            _ = m.mgPerDL
            return GlucoseMeasurement.decode(m.encoded()) == .success(m)
        }
        check(GlucoseMeasurementContext.decode(input), input, &t, "0x2A34") { c in
            GlucoseMeasurementContext.decode(c.encoded()) == .success(c)
        }
        check(GlucoseFeatures.decode(input), input, &t, "0x2A51") { f in
            f.rawValue == UInt16(input[0]) | UInt16(input[1]) << 8
        }
        check(RACPRequest.decode(input), input, &t, "RACP request") { r in
            RACPRequest.decode(r.encoded()) == .success(r)
        }
        check(RACPResponse.decode(input), input, &t, "RACP response") { r in
            RACPResponse.decode(r.encoded()) == .success(r)
        }
        check(GlucoseDateTime.decode(input), input, &t, "Date Time") { d in
            d.encoded()[...] == input.prefix(7)
        }
        if iteration % 64 == 0 {
            let agree = throwing({ () throws(GlucoseDecodingError) in try GlucoseMeasurement(bytes: input) }) == GlucoseMeasurement.decode(input)
                && throwing({ () throws(GlucoseDecodingError) in try GlucoseMeasurementContext(bytes: input) }) == GlucoseMeasurementContext.decode(input)
                && throwing({ () throws(GlucoseDecodingError) in try GlucoseFeatures(bytes: input) }) == GlucoseFeatures.decode(input)
                && throwing({ () throws(GlucoseDecodingError) in try RACPRequest(bytes: input) }) == RACPRequest.decode(input)
                && throwing({ () throws(GlucoseDecodingError) in try RACPResponse(bytes: input) }) == RACPResponse.decode(input)
                && throwing({ () throws(GlucoseDecodingError) in try GlucoseDateTime(bytes: input) }) == GlucoseDateTime.decode(input)
            if !agree { t.problem("throwing and non-throwing decoders disagree on \(input)") }
        }
    }

    func check<T>(_ result: Result<T, GlucoseDecodingError>, _ input: [UInt8], _ t: inout Tally, _ name: StaticString,
                  _ valueIsConsistent: (T) -> Bool) {
        switch result {
        case let .success(value):
            t.values += 1
            if !valueIsConsistent(value) { t.problem("\(name) re-encode \(input)") }
        case let .failure(error):
            t.error(error, input, name)
        }
    }

    func throwing<T>(_ body: () throws(GlucoseDecodingError) -> T) -> Result<T, GlucoseDecodingError> {
        do throws(GlucoseDecodingError) {
            return .success(try body())
        } catch {
            return .failure(error)
        }
    }
}
