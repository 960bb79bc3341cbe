/// Text from outside (a meter's name and Device Information strings, a server's error body, a file's
/// contents, a command-line token) made safe for a terminal and for one log line: every control character
/// (C0, DEL and C1: ESC, BEL, CR, LF, NUL, TAB ...) is shown as an escape (`\e`, `\a`, `\r`, `\n`, `\0`,
/// `\t`, else `\xHH`), so it can neither move the cursor, ring the bell, recolour the
/// terminal nor start a new line in a table or the journal. Backslashes are kept as they are.
public enum TerminalText {
    public static func escaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            let v = scalar.value
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
