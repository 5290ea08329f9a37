@testable import Fetching
import Locking
import XCTest

/// URL forms that try to reach inside the network, and what becomes of each under the default
/// policy. Names resolve through an injected table, so nothing here touches a real resolver;
/// refusals are also checked through a whole `fetch`, which shows they come before any
/// connection (nothing listens on those addresses: an attempt would end as `.unavailable`
/// or `.timedOut`, not `.refused`).
final class SSRFTableTests: XCTestCase {
    enum Verdict: Equatable {
        case badURL
        case refused
        case allowed(String)
    }

    static let names: [String: [String]] = [
        "localhost": ["127.0.0.1", "::1"],
        "127.0.0.1.nip.io": ["127.0.0.1"],
        "example.com": ["93.184.216.34"],
        "v6.example": ["2606:2800:220:1:248:1893:25c8:1946"],
        "mixed.example": ["93.184.216.34", "10.0.0.1"],
        "meta.example": ["169.254.169.254"],
        "mapped.example": ["::ffff:10.1.2.3"],
    ]

    static let table: [(String, Verdict)] = [
        ("http://127.0.0.1/", .refused),
        ("http://localhost/", .refused),
        ("http://2130706433/", .refused),
        ("http://0x7f000001/", .refused),
        ("http://0177.0.0.1/", .refused),
        ("http://017700000001/", .refused),
        ("http://0x7f.0x00.0x00.0x01/", .refused),
        ("http://127.1/", .refused),
        ("http://127.0.0.1./", .refused),
        ("http://0/", .refused),
        ("http://0.0.0.0:8080/", .refused),
        ("http://[::1]/", .refused),
        ("http://[::ffff:127.0.0.1]/", .refused),
        ("http://[::ffff:7f00:1]/", .refused),
        ("http://[0:0:0:0:0:ffff:127.0.0.1]/", .refused),
        ("http://[::]/", .refused),
        ("http://[fe80::1%25eth0]/", .badURL),
        ("http://[fe80::1]/", .refused),
        ("http://169.254.169.254/latest/meta-data/", .refused),
        ("http://[::ffff:169.254.169.254]/", .refused),
        ("http://[fd00:ec2::254]/", .refused),
        ("http://100.100.100.200/", .refused),
        ("http://10.0.0.1/", .refused),
        ("http://172.16.0.1/", .refused),
        ("http://192.168.1.1/", .refused),
        ("http://100.64.0.1/", .refused),
        ("http://224.0.0.1/", .refused),
        ("http://255.255.255.255/", .refused),
        ("http://192.0.2.1/", .refused),
        ("http://[2001:db8::1]/", .refused),
        ("http://[64:ff9b::7f00:1]/", .refused),
        ("http://[2002:7f00:1::]/", .refused),
        ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", .refused),
        ("http://[fc00::1]/", .refused),
        ("http://user@example.com/", .badURL),
        ("http://user:pw@example.com/", .badURL),
        ("http://@example.com/", .badURL),
        ("http://127.0.0.1:80@example.com/", .badURL),
        ("http://example.com@127.0.0.1/", .badURL),
        ("http://example.com\\@127.0.0.1/", .badURL),
        ("http://exa mple.com/", .badURL),
        ("http://example.com\t/", .badURL),
        ("ftp://example.com/", .badURL),
        ("file:///etc/passwd", .badURL),
        ("gopher://x/", .badURL),
        ("javascript:alert(1)", .badURL),
        ("http://example.com:0/", .badURL),
        ("http://example.com:65536/", .badURL),
        ("http://example.com:80a/", .badURL),
        ("http://ex%61mple.com/", .badURL),
        ("http://%31%32%37.0.0.1/", .badURL),
        ("http://пример.рф/", .badURL),
        ("http://256.0.0.1/", .badURL),
        ("http://127.0.0.1.nip.io/", .refused),
        ("http://meta.example/", .refused),
        ("http://mapped.example/", .refused),
        ("http://mixed.example/", .refused),
        ("HTTP://EXAMPLE.COM/", .allowed("93.184.216.34")),
        ("http://example.com#@127.0.0.1/", .allowed("93.184.216.34")),
        ("http://example.com?@127.0.0.1/", .allowed("93.184.216.34")),
        ("http://Example.COM./a?b", .allowed("93.184.216.34")),
        ("https://example.com:443/x.jpg", .allowed("93.184.216.34")),
        ("http://v6.example/", .allowed("2606:2800:220:1:248:1893:25c8:1946")),
        ("http://93.184.216.34/", .allowed("93.184.216.34")),
        ("http://[2606:4700:4700::1111]/", .allowed("2606:4700:4700::1111")),
        ("http://[::ffff:8.8.8.8]/", .allowed("::ffff:8.8.8.8")),
        ("http://1.1/", .allowed("1.0.0.1")),
    ]

    func testTableOfTrickyURLs() {
        XCTAssertGreaterThanOrEqual(Self.table.count, 30)
        let lookedUp = Lock<[String]>([])
        let lookup = NameLookup { name throws(FetchError) in
            lookedUp.withLock { $0.append(name) }
            guard let addresses = Self.names[name] else { throw .unavailable("no such host \(name)") }
            return addresses.map { IPAddress($0)! }
        }
        var policy = URLSourcePolicy()
        policy.connectTimeout = .milliseconds(200)
        policy.totalTimeout = .seconds(2)
        let fetcher = URLFetcher(policy: policy, lookup: lookup)
        defer { fetcher.shutdown() }

        for (text, expected) in Self.table {
            XCTAssertEqual(Self.verdict(text, fetcher: fetcher), expected, text)
            if case .allowed = expected { continue }
            // The whole fetch ends the same way, and before any connection.
            do {
                _ = try fetcher.fetch(text, cancellation: FetchCancellation(), events: { _ in })
                XCTFail("\(text): fetched")
            } catch {
                switch (expected, error) {
                case (.badURL, .badURL), (.refused, .refused): break
                default: XCTFail("\(text): \(error)")
                }
            }
        }
        // Names are looked up only once the URL around them has been accepted.
        XCTAssertEqual(Set(lookedUp.withLock { $0 }), ["localhost", "127.0.0.1.nip.io", "meta.example", "mapped.example", "mixed.example", "example.com", "v6.example"])
    }

    static func verdict(_ text: String, fetcher: URLFetcher) -> Verdict {
        do {
            let url = try SourceURL(parsing: text)
            var resolved: [String: [IPAddress]] = [:]
            return .allowed(try fetcher.checkedAddress(of: url, resolved: &resolved).description)
        } catch .badURL {
            return .badURL
        } catch .refused {
            return .refused
        } catch {
            return .allowed("unexpected \(error)")
        }
    }

    func testRefusalNamesTheAddressAndItsCategory() {
        let lookup = NameLookup { name throws(FetchError) in Self.names[name]!.map { IPAddress($0)! } }
        let fetcher = URLFetcher(lookup: lookup)
        defer { fetcher.shutdown() }
        XCTAssertThrowsError(try fetcher.fetch("http://mixed.example/", cancellation: .init(), events: { _ in })) {
            XCTAssertEqual($0 as? FetchError, .refused("mixed.example resolves to 10.0.0.1, a private-use address"))
        }
        XCTAssertThrowsError(try fetcher.fetch("http://0x7f.1/", cancellation: .init(), events: { _ in })) {
            XCTAssertEqual($0 as? FetchError, .refused("127.0.0.1 is a loopback address"))
        }
        XCTAssertThrowsError(try fetcher.fetch("http://[::ffff:a9fe:a9fe]/", cancellation: .init(), events: { _ in })) {
            XCTAssertEqual($0 as? FetchError, .refused("[::ffff:169.254.169.254] is a cloud metadata address"))
        }
    }
}

/// `--url-allow ::/0` opens IPv6, not the IPv4 space that IPv6 forms can carry.
final class AllowAllIPv6Tests: XCTestCase {
    func testAllowingAllOfIPv6OpensNoPrivateIPv4ThroughItsIPv6Forms() {
        let policy = AddressPolicy(allowed: [IPNetwork("::/0")!])
        for text in ["::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:0:192.168.1.1", "64:ff9b::a00:1", "2002:7f00:1::1",
                     "::ffff:169.254.169.254"] {
            XCTAssertFalse(policy.permits(IPAddress(text)!), text)
        }
        for text in ["::1", "fd00::1", "fe80::1", "::ffff:8.8.8.8", "2001:db8::1"] {
            XCTAssertTrue(policy.permits(IPAddress(text)!), text)
        }
    }

    func testIPv4FormsAreStillOpenedByTheirIPv4NetworkOrANarrowIPv6One() {
        XCTAssertTrue(AddressPolicy(allowed: [IPNetwork("127.0.0.1/32")!]).permits(IPAddress("::ffff:127.0.0.1")!))
        XCTAssertTrue(AddressPolicy(allowed: [IPNetwork("::ffff:a00:0/104")!]).permits(IPAddress("::ffff:10.1.2.3")!))
        XCTAssertTrue(AddressPolicy(allowed: [IPNetwork("64:ff9b::/96")!]).permits(IPAddress("64:ff9b::a00:1")!))
        XCTAssertFalse(AddressPolicy(allowed: [IPNetwork("::/80")!]).permits(IPAddress("::ffff:127.0.0.1")!))
    }
}
