@testable import Fetching
import XCTest

final class AddressTests: XCTestCase {
    func testDottedQuadIsStrict() {
        XCTAssertEqual(IPAddress("127.0.0.1")?.value, .v4(0x7f00_0001))
        XCTAssertEqual(IPAddress("255.255.255.255")?.value, .v4(.max))
        for text in ["127.1", "0177.0.0.1", "127.0.0.01", "256.0.0.1", "1.2.3.4.", "1.2.3.4.5", "", "a.b.c.d", "1..2.3", "+1.2.3.4"] {
            XCTAssertNil(IPAddress(text), text)
        }
    }

    func testIPv6TextForms() {
        XCTAssertEqual(IPAddress("::1"), IPAddress(v6: 0, 1))
        XCTAssertEqual(IPAddress("::"), IPAddress(v6: 0, 0))
        XCTAssertEqual(IPAddress("::ffff:127.0.0.1"), IPAddress(v6: 0, 0xffff_7f00_0001))
        XCTAssertEqual(IPAddress("0:0:0:0:0:FFFF:7F00:1"), IPAddress(v6: 0, 0xffff_7f00_0001))
        XCTAssertEqual(IPAddress("2001:db8::"), IPAddress(v6: 0x2001_0db8_0000_0000, 0))
        XCTAssertEqual(IPAddress("1:2:3:4:5:6:7::"), IPAddress(v6: 0x0001_0002_0003_0004, 0x0005_0006_0007_0000))
        for text in [":::", "1:::2", "1::2::3", ":1::", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", "12345::", "::g",
                     "1.2.3.4::", "::1.2.3", "fe80::1%eth0", "1:", ":1"] {
            XCTAssertNil(IPAddress(text), text)
        }
    }

    func testDescriptionIsRFC5952() {
        XCTAssertEqual(IPAddress("2001:0db8:0000:0000:0000:0000:0002:0001")?.description, "2001:db8::2:1")
        XCTAssertEqual(IPAddress("2001:db8:0:1:0:0:0:1")?.description, "2001:db8:0:1::1")
        XCTAssertEqual(IPAddress("2001:0:0:1:0:0:0:1")?.description, "2001:0:0:1::1")
        XCTAssertEqual(IPAddress("1:0:0:2:0:0:3:4")?.description, "1::2:0:0:3:4")
        XCTAssertEqual(IPAddress("1:2:3:4:5:6:0:8")?.description, "1:2:3:4:5:6:0:8")
        XCTAssertEqual(IPAddress("::")?.description, "::")
        XCTAssertEqual(IPAddress("::1")?.description, "::1")
        XCTAssertEqual(IPAddress("::ffff:7f00:1")?.description, "::ffff:127.0.0.1")
        XCTAssertEqual(IPAddress("10.0.0.1")?.description, "10.0.0.1")
        XCTAssertEqual(IPAddress(bytes: [192, 168, 1, 2]), IPAddress("192.168.1.2"))
        XCTAssertEqual(IPAddress("fd00:ec2::254")?.bytes, [0xfd, 0, 0x0e, 0xc2] + Array(repeating: 0, count: 10) + [2, 0x54])
    }

    func testNetworks() throws {
        let ten = try XCTUnwrap(IPNetwork("10.0.0.0/8"))
        XCTAssertTrue(ten.contains(IPAddress("10.255.1.2")!))
        XCTAssertFalse(ten.contains(IPAddress("11.0.0.0")!))
        XCTAssertFalse(ten.contains(IPAddress("::ffff:10.0.0.1")!), "a v4 network holds v4 addresses only")
        XCTAssertEqual(IPNetwork("127.0.0.1")?.prefixLength, 32)
        XCTAssertTrue(IPNetwork("::1/128")!.contains(IPAddress("::1")!))
        XCTAssertTrue(IPNetwork("0.0.0.0/0")!.contains(IPAddress("8.8.8.8")!))
        XCTAssertTrue(IPNetwork("fe80::/10")!.contains(IPAddress("febf::1")!))
        XCTAssertFalse(IPNetwork("fe80::/10")!.contains(IPAddress("fec0::1")!))
        XCTAssertTrue(IPNetwork("2001:db8::/96")!.contains(IPAddress("2001:db8::ffff:ffff")!))
        for text in ["10.0.0.1/8", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "example.com/8", "::1/ 128"] {
            XCTAssertNil(IPNetwork(text), text)
        }
    }

    func testCategories() {
        let expected: [(String, AddressCategory)] = [
            ("8.8.8.8", .publicUnicast), ("93.184.216.34", .publicUnicast), ("2606:4700:4700::1111", .publicUnicast),
            ("127.0.0.1", .loopback), ("127.255.255.254", .loopback), ("::1", .loopback),
            ("10.1.2.3", .privateUse), ("172.16.0.1", .privateUse), ("172.31.255.255", .privateUse),
            ("172.32.0.1", .publicUnicast), ("192.168.0.1", .privateUse),
            ("169.254.1.1", .linkLocal), ("fe80::1", .linkLocal),
            ("224.0.0.1", .multicast), ("239.255.255.250", .multicast), ("ff02::1", .multicast),
            ("0.0.0.0", .unspecified), ("::", .unspecified), ("0.1.2.3", .thisNetwork),
            ("255.255.255.255", .broadcast), ("240.0.0.1", .reserved), ("192.0.0.8", .reserved),
            ("100.64.0.1", .sharedAddressSpace), ("100.127.255.255", .sharedAddressSpace),
            ("192.0.2.1", .documentation), ("198.51.100.1", .documentation), ("203.0.113.9", .documentation),
            ("2001:db8::1", .documentation), ("3fff::1", .documentation),
            ("198.18.0.1", .benchmarking), ("2001:2::1", .benchmarking),
            ("169.254.169.254", .metadata), ("169.254.170.2", .metadata), ("100.100.100.200", .metadata),
            ("192.0.0.192", .metadata), ("fd00:ec2::254", .metadata), ("::ffff:169.254.169.254", .metadata),
            ("fc00::1", .uniqueLocal), ("fd12:3456::1", .uniqueLocal), ("fec0::1", .siteLocal),
            ("::ffff:127.0.0.1", .loopback), ("::ffff:0:10.0.0.1", .privateUse), ("::10.0.0.1", .privateUse),
            ("::ffff:8.8.8.8", .publicUnicast),
            ("64:ff9b::7f00:1", .loopback), ("64:ff9b::808:808", .publicUnicast), ("64:ff9b:1::1", .reserved),
            ("2002:7f00:1::", .loopback), ("2002:c0a8:101::1", .privateUse), ("2002:808:808::1", .publicUnicast),
            // Teredo: the client address is the last 32 bits inverted (0x80fffffe is 127.0.0.1).
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", .loopback), ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", .publicUnicast),
            ("2001:10::1", .reserved), ("100::1", .reserved), ("5f00::1", .reserved), ("4000::1", .reserved),
            ("::2", .thisNetwork),
        ]
        for (text, category) in expected {
            XCTAssertEqual(IPAddress(text)?.category, category, text)
        }
    }

    func testPolicyAllowListOverridesCategories() {
        let strict = AddressPolicy.publicUnicastOnly
        XCTAssertTrue(strict.permits(IPAddress("8.8.8.8")!))
        XCTAssertFalse(strict.permits(IPAddress("127.0.0.1")!))

        let local = AddressPolicy(allowed: [IPNetwork("127.0.0.1/32")!, IPNetwork("10.1.0.0/16")!])
        XCTAssertTrue(local.permits(IPAddress("127.0.0.1")!))
        XCTAssertTrue(local.permits(IPAddress("::ffff:127.0.0.1")!), "the mapped form is the same endpoint")
        XCTAssertFalse(local.permits(IPAddress("127.0.0.2")!))
        XCTAssertFalse(local.permits(IPAddress("::1")!))
        XCTAssertTrue(local.permits(IPAddress("10.1.200.3")!))
        XCTAssertFalse(local.permits(IPAddress("10.2.0.1")!))
        XCTAssertTrue(local.permits(IPAddress("1.1.1.1")!), "public addresses stay permitted")
    }

    func testMetadataNeedsAnExactAllowance() {
        let broad = AddressPolicy(allowed: [IPNetwork("100.64.0.0/10")!, IPNetwork("169.254.0.0/16")!])
        XCTAssertTrue(broad.permits(IPAddress("100.100.100.199")!))
        XCTAssertFalse(broad.permits(IPAddress("100.100.100.200")!))
        XCTAssertFalse(broad.permits(IPAddress("169.254.169.254")!))
        let exact = AddressPolicy(allowed: [IPNetwork("169.254.169.254/32")!])
        XCTAssertTrue(exact.permits(IPAddress("169.254.169.254")!))
    }

    func testProgressThrottleIsByTime() {
        var throttle = ProgressThrottle(interval: .milliseconds(250))
        let start = ContinuousClock.now
        // A chunk every 10 ms for 1.5 s: the first, then one per 250 ms.
        let reports = (0..<150).filter { throttle.shouldReport(at: start + .milliseconds(10 * $0)) }
        XCTAssertEqual(reports, [0, 25, 50, 75, 100, 125])
        XCTAssertFalse(throttle.shouldReport(at: start + .milliseconds(1499)))
        XCTAssertTrue(throttle.shouldReport(at: start + .milliseconds(1500)))
    }

    func testErrorMessagesNameTheCause() {
        XCTAssertEqual(FetchError.tooLarge(limit: 100).message, "too large: the body is over the limit of 100 bytes")
        XCTAssertEqual(FetchError.refused("10.0.0.1 is a private-use address").message, "refused: 10.0.0.1 is a private-use address")
        XCTAssertEqual(FetchError.cancelled.message, "cancelled")
        XCTAssertEqual(FetchError.timedOut("read timeout").message, "timed out: read timeout")
    }
}
