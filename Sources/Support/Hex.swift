/// Hexadecimal of bytes, both ways: idempotency keys and UUIDs, `decode`'s input and output, meter files,
/// JSON `\u` escapes, percent-encoding and escaped terminal text.
private let lowerDigits = Array("0123456789abcdef".utf8)
private let upperDigits = Array("0123456789ABCDEF".utf8)

/// Two hex digits per byte, no separators: `[0x1b, 0xe8]` is `1be8` (`1BE8` when `uppercase`).
public func hexString<S: Sequence>(_ bytes: S, uppercase: Bool = false) -> String where S.Element == UInt8 {
    let digits = uppercase ? upperDigits : lowerDigits
    var out: [UInt8] = []
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
}

/// The value of one ASCII hex digit (`0-9`, `a-f`, `A-F`), nil for anything else.
public func hexDigitValue(_ c: UInt32) -> UInt8? {
    switch c {
    case 0x30...0x39: UInt8(c - 0x30)
    case 0x41...0x46: UInt8(c - 0x41 + 10)
    case 0x61...0x66: UInt8(c - 0x61 + 10)
    default: nil
    }
}

/// Bytes from pairs of hex digits, with any of `separators` allowed between digits: nil for an odd number
/// of digits or any other character.
public func hexBytes(_ text: String, separators: Set<Unicode.Scalar> = [" ", ":"]) -> [UInt8]? {
    var out: [UInt8] = []
    var high: UInt8?
    for scalar in text.unicodeScalars {
        if separators.contains(scalar) { continue }
        guard let nibble = hexDigitValue(scalar.value) else { return nil }
        if let h = high {
            out.append(h << 4 | nibble)
            high = nil
        } else {
            high = nibble
        }
    }
    return high == nil ? out : nil
}
