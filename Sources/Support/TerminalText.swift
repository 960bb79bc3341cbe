/// Text from outside (a meter's name and Device Information strings, a server's error body, a file's
/// contents, a command-line token) made safe for a terminal and for one log line: every control character
/// (C0, DEL and C1: ESC, BEL, CR, LF, NUL, TAB ...) is shown as an escape (`\e`, `\a`, `\r`, `\n`, `\0`,
/// `\t`, else `\xHH`), so it can neither move the cursor, ring the bell, recolour the
/// terminal nor start a new line in a table or the journal. The bidirectional overrides and isolates
/// (U+202A-U+202E, U+2066-U+2069) and the line and paragraph separators (U+2028, U+2029) are shown as
/// `\u{XXXX}`, so they cannot reverse or break what follows them on the line. Backslashes are kept as
/// they are.
public enum TerminalText {
    public static func escaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            let v = scalar.value
            if (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) || v == 0x2028 || v == 0x2029 {
                out += "\\u{" + String(v, radix: 16, uppercase: true) + "}"
                continue
            }
            guard v < 0x20 || (v >= 0x7F && v <= 0x9F) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch v {
            case 0x00: out += "\\0"
            case 0x07: out += "\\a"
            case 0x08: out += "\\b"
            case 0x09: out += "\\t"
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x1B: out += "\\e"
            default:
                out += "\\x" + hexString([UInt8(v)], uppercase: true)
            }
        }
        return out
    }

    /// `escaped`, cut to `limit` characters of the original (with an ellipsis when cut).
    public static func escaped(_ text: String, limit: Int) -> String {
        guard text.count > limit else { return escaped(text) }
        return escaped(String(text.prefix(limit))) + "..."
    }
}
