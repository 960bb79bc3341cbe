import GatewayCore
import Support
import Testing

@Suite("Substring search on UTF-8 bytes")
struct ByteSearchTests {
    @Test("finds a word anywhere, or not at all")
    func containsBytes() {
        #expect("keep-alive, Upgrade".containsBytes("keep-alive"))
        #expect("Upgrade, keep-alive".containsBytes("keep-alive"))
        #expect("gzip, chunked".containsBytes("chunked"))
        #expect(!"chunke".containsBytes("chunked"))
        #expect(!"".containsBytes("x"))
        #expect("abc".containsBytes(""))
        #expect("aaab".containsBytes("aab"))
        #expect("apisecretfile".dropFirst(3).containsBytes("secret"))
    }

    @Test("a combining mark after the word still counts as a match of its bytes")
    func combiningMarks() {
        // "..\u{301}": as Characters, "." then ".\u{301}", so Character-wise search finds no "..".
        // For a file name check the stricter byte match is the wanted one.
        #expect("Europe/..\u{301}/x".containsBytes(".."))
        #expect(!".\u{301}.".containsBytes(".."))
    }

    @Test("the index after the first occurrence")
    func endOfFirst() throws {
        let message = "Operation failed with ATT error: 0x0e, then ATT error: 0x81"
        let end = try #require(message.utf8EndOfFirst("ATT error: 0x"))
        #expect(message[end...].hasPrefix("0e"))
        #expect("no error".utf8EndOfFirst("ATT error: 0x") == nil)
        #expect("ATT error: 0x".utf8EndOfFirst("ATT error: 0x") == "ATT error: 0x".endIndex)
    }
}
