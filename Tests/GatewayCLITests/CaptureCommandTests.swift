import Testing
@testable import GatewayCLI

/// What `capture` writes about BlueZ: the bluez package's version from dpkg's status file.
struct CaptureCommandTests {
    @Test func theBluezStanzaGivesTheVersion() {
        let status = """
        Package: bluez-obexd
        Status: install ok installed
        Version: 5.66-1+deb12u2

        Package: bluez
        Status: install ok installed
        Architecture: arm64
        Version: 5.66-1+rpt1+deb12u2
        Description: Bluetooth tools and daemons

        Package: bluez-firmware
        Version: 1.2-9
        """
        #expect(BlueZVersion.version(inDpkgStatus: status) == "5.66-1+rpt1+deb12u2")
    }

    @Test func noBluezNoVersion() {
        #expect(BlueZVersion.version(inDpkgStatus: "Package: bluez-firmware\nVersion: 1.2-9\n") == nil)
        #expect(BlueZVersion.version(inDpkgStatus: "") == nil)
        #expect(BlueZVersion.installed(statusFile: "/nonexistent/status") == nil)
    }
}
