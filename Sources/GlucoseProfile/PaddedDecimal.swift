/// Decimal text written straight into a byte buffer, for the formatters of times, keys and bodies.
public enum PaddedDecimal {
    /// `String(value)` left-padded with `0` to `width` characters, as text has always been padded here
    /// (the zeros go before a minus sign: -5 in width 4 is `00-5`), written at `p[at...]`, `at` moved past
    /// it. Width 0 gives `String(value)` itself. At most 20 bytes unless `width` asks for more.
    @inlinable
    public static func write(_ value: Int, width: Int, _ p: UnsafeMutablePointer<UInt8>, _ at: inout Int) {
        var magnitude = value.magnitude
        var digits = 1
        var rest = magnitude / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        var zeros = width - digits - (value < 0 ? 1 : 0)
        while zeros > 0 {
            p[at] = UInt8(ascii: "0")
            at += 1
            zeros -= 1
        }
        if value < 0 {
            p[at] = UInt8(ascii: "-")
            at += 1
        }
        var i = at + digits
        at = i
        repeat {
            i -= 1
            p[i] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
    }
}
