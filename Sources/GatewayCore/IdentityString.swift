/// Strings a meter names itself with (Device Information: manufacturer, model, serial, firmware; the
/// advertised name) as the gateway stores and sends them: control characters removed and the length bounded.
///
/// A meter may send anything up to the 512 bytes an attribute holds, and a hostile or broken one more over
/// several reads: a 10 KB model string once went into every Nightscout entry and MQTT discovery message.
/// Real meters' strings are short ("Accu-Chek Guide", "ASCENSIA", a 10-digit serial), so 64 characters is
/// generous. The cut is on a character (grapheme) boundary, and also at 256 bytes of UTF-8, so that one
/// "character" made of thousands of combining marks cannot carry the length back in.
public enum IdentityString {
    public static let maxCharacters = 64
    public static let maxUTF8Bytes = 256
    /// The most bytes kept of a value as sent (the longest an attribute value can be, Core Vol 3 Part F 3.2.9).
    public static let maxRawBytes = 512

    /// `text` without control characters (NUL included), cut to `maxCharacters` whole characters and
    /// `maxUTF8Bytes` bytes.
    public static func bounded(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        for s in text.unicodeScalars where s.properties.generalCategory != .control {
            scalars.append(s)
        }
        return capped(String(scalars))
    }

    /// `text` cut to `maxCharacters` whole characters and `maxUTF8Bytes` bytes, nothing else changed (for
    /// senders whose encoding already deals with control characters).
    public static func capped(_ text: String) -> String {
        guard text.utf8.count > maxCharacters else { return text }
        var out = ""
        var characters = 0
        var bytes = 0
        for c in text {
            let size = c.utf8.count
            guard characters < maxCharacters, bytes + size <= maxUTF8Bytes else { break }
            out.append(c)
            characters += 1
            bytes += size
        }
        return out
    }

    /// As `bounded`, nil for nil.
    public static func bounded(_ text: String?) -> String? { text.map { bounded($0) } }

    /// As `capped`, nil for nil.
    public static func capped(_ text: String?) -> String? { text.map { capped($0) } }
}

extension MeterInfo {
    /// This meter with its name and Device Information strings bounded (`IdentityString`): what uploads
    /// carry, also for a row stored before the bound existed.
    public var withBoundedIdentity: MeterInfo {
        var m = self
        m.name = IdentityString.bounded(name)
        m.manufacturer = IdentityString.bounded(manufacturer)
        m.model = IdentityString.bounded(model)
        m.serial = IdentityString.bounded(serial)
        m.firmware = IdentityString.bounded(firmware)
        return m
    }
}
