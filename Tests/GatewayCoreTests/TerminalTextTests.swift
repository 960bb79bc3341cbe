import GatewayCore
import Support
import Testing

@Suite("text from outside on a terminal")
struct TerminalTextTests {
    struct Case: Sendable, CustomStringConvertible {
        var input: String
        var shown: String
        var description: String { shown }
    }

    @Test(arguments: [
        Case(input: "plain Accu-Chek Guide", shown: "plain Accu-Chek Guide"),
        Case(input: "a\u{1B}[31mred", shown: "a\\e[31mred"),
        Case(input: "bell\u{07}", shown: "bell\\a"),
        Case(input: "line\r\nINJECTED LINE", shown: "line\\r\\nINJECTED LINE"),
        Case(input: "nul\u{0}x", shown: "nul\\0x"),
        Case(input: "tab\tbs\u{08}", shown: "tab\\tbs\\b"),
        Case(input: "del\u{7F} csi\u{9B}", shown: "del\\x7F csi\\x9B"),
        Case(input: "\u{01}\u{1F}", shown: "\\x01\\x1F"),
        Case(input: "Zürich 😀 back\\slash", shown: "Zürich 😀 back\\slash"),
        // Bidirectional overrides and isolates: a meter named with U+202E would show the rest of a `meters`
        // line (its readings count, its skew) reversed.
        Case(input: "GL-1\u{202E}021 readings", shown: "GL-1\\u{202E}021 readings"),
        Case(input: "\u{202A}\u{202B}\u{202C}\u{202D}\u{2066}\u{2067}\u{2068}\u{2069}",
             shown: "\\u{202A}\\u{202B}\\u{202C}\\u{202D}\\u{2066}\\u{2067}\\u{2068}\\u{2069}"),
        Case(input: "\u{2029}para\u{2028}line", shown: "\\u{2029}para\\u{2028}line"),
    ])
    func controlCharactersAreEscaped(_ c: Case) {
        #expect(TerminalText.escaped(c.input) == c.shown)
    }

    @Test func longTextIsCut() {
        #expect(TerminalText.escaped(String(repeating: "x", count: 50), limit: 40) == String(repeating: "x", count: 40) + "...")
        #expect(TerminalText.escaped("short\n", limit: 40) == "short\\n")
    }
}
