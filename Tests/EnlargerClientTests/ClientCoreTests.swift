import EnlargerProtocol
import Imaging
import XCTest

@testable import Enlarger

private typealias H = ClientCoreHarness

/// The client's protocol decisions, without sockets, threads or a real clock.
final class ClientCoreTests: XCTestCase {
    // MARK: Events

    func testAProgressiveRequestGetsDegradedThenFinalAndEnds() {
        var harness = H()
        let token = harness.submit("a")
        XCTAssertEqual(harness.sentSummary, ["submit a"])
        harness.broker([H.accepted("a"), H.started("a"), H.degraded("a"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 started 1", "#1 degraded", "#1 final"])
        XCTAssertEqual(harness.actions[2], .deliver(
            token, .degraded(EncodedImage(bytes: [7], width: 10, height: 8, format: .jpeg)), terminal: false))
        XCTAssertTrue(harness.core.isIdle)
        XCTAssertNil(harness.core.nextWakeup, "nothing to wake up for once idle")
        // Late frames about an ended request reach nobody.
        harness.clear()
        harness.broker([H.degraded("a"), H.final("a")])
        XCTAssertEqual(harness.summary, [])
    }

    func testAResultThisVersionCannotReadEndsTheRequest() {
        var harness = H()
        harness.submit("a")
        var result = Enlarger_V1_Result()
        result.requestID = "a"
        result.stage = .unspecified
        result.terminal = false
        harness.broker([H.accepted("a"), .result(result, image: [1])])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails failed malformed"])
        XCTAssertTrue(harness.core.isIdle)
    }

    func testFailedCancelledAndRejectedEndTheOldestRequestWithTheId() {
        var harness = H()
        harness.submit("a")
        harness.submit("b")
        harness.submit("c")
        harness.broker([H.accepted("a"), H.failed("a", .corrupt, "bad Huffman code"), H.cancelled("b")])
        var rejected = Enlarger_V1_Rejected()
        rejected.requestID = "c"
        rejected.code = .overloaded
        harness.broker(.rejected(rejected))
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails failed corrupt", "#2 fails cancelled",
                                         "#3 fails rejected overloaded"])
        XCTAssertEqual(harness.actions[1], .fail(RequestToken(value: 1), .failed(.corrupt, "bad Huffman code")))
    }

    func testDuplicateIDFromTheBrokerEndsTheRequestThatWasRefused() {
        var harness = H()
        harness.submit("taken")
        harness.broker(H.failed("taken", .duplicateID, "a request with this id is already live"))
        XCTAssertEqual(harness.actions, [.fail(RequestToken(value: 1), .duplicateID("a request with this id is already live"))])
    }

    func testStatusCallsAreAnsweredInOrder() {
        var harness = H()
        harness.status()
        harness.status()
        XCTAssertEqual(harness.sentSummary, ["status", "status"])
        harness.broker([.statusReply(.init()), .statusReply(.init()), .statusReply(.init())])
        XCTAssertEqual(harness.summary, ["#1 status", "#2 status"], "an answer nobody waits for is dropped")
    }

    // MARK: Cancel

    func testCancelBeforeAcceptedFollowsTheSubmitAndTheRequestEndsWithTheBrokersCancelled() {
        var harness = H()
        harness.submit("a")
        harness.cancel("a")
        XCTAssertEqual(harness.sentSummary, ["submit a", "cancel a"])
        // The consumer sees none of this: its channel was marked when `cancel` was called.
        // The core still gives the request exactly one end, when the broker's comes.
        harness.broker([H.accepted("a"), H.cancelled("a"), H.cancelAck("a", .cancelled)])
        XCTAssertEqual(harness.summary, ["#1 accepted", "#1 fails cancelled", "#2 cancel: cancelled"])
        XCTAssertTrue(harness.core.isIdle)
    }

    func testACancelledRequestKeepsItsLateFramesFromALaterRequestWithTheSameID() {
        var harness = H()
        harness.submit("a")
        harness.broker([H.accepted("a"), H.started("a")])
        harness.clear()
        harness.cancel("a", waits: false)
        harness.submit("a")  // the id may be used again at once
        XCTAssertEqual(harness.sentSummary, ["cancel a", "submit a"])
        harness.broker([H.degraded("a"), H.cancelled("a"), H.cancelAck("a", .cancelled), H.accepted("a"), H.final("a")])
        XCTAssertEqual(harness.summary, ["#1 degraded", "#1 fails cancelled", "#2 accepted", "#2 final"])
    }

    func testACancelledRequestIsNotSubmittedAgainToARestartedBroker() {
        var harness = H()
        harness.submit("a")
        harness.broker(H.accepted("a", instance: 1))
        harness.cancel("a")
        harness.clear()
        harness.broker(.pong(H.pong(instance: 2)))
        XCTAssertEqual(harness.summary, ["#2 cancel fails brokerLost", "#1 fails cancelled"])
        XCTAssertEqual(harness.sentSummary, [])
        XCTAssertTrue(harness.core.isIdle)
    }

    // MARK: Liveness

    func testPingsFollowTheClientsIntervalThenTheBrokersShorterOne() {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(10))
        harness.submit("a")
        harness.clear()
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .seconds(1))
        harness.advance(by: .milliseconds(999))
        XCTAssertEqual(harness.sentSummary, [])
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.sentSummary, ["ping"])

        harness.broker(H.accepted("a", intervalMs: 200))
        harness.clear()
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .milliseconds(200))
        harness.advance(by: .seconds(1), step: .milliseconds(50))
        XCTAssertEqual(harness.sentSummary, Array(repeating: "ping", count: 5))
        XCTAssertEqual(harness.summary, [], "alive while the broker answers")
    }

    func testNoPingWhileMessagesWaitForTheSocket() {
        var harness = H(heartbeat: .seconds(1))
        harness.connected = false
        harness.submit("a")
        harness.advance(by: .milliseconds(1500))
        XCTAssertEqual(harness.sentSummary, [])
        harness.connected = true
        harness.flush()
        XCTAssertEqual(harness.sentSummary, ["submit a"], "no Ping queued behind the Submit")
    }

    func testBrokerSilenceFailsEverythingOutstandingAndStartsOver() {
        var harness = H(heartbeat: .milliseconds(100), missedHeartbeats: 3)
        harness.submit("a")
        harness.submit("b")
        harness.cancel("c")
        harness.status()
        harness.broker(H.accepted("a"))
        harness.clear()
        harness.advance(by: .milliseconds(299))
        XCTAssertEqual(harness.summary, [])
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .milliseconds(1))
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.summary, ["#1 fails brokerLost", "#2 fails brokerLost", "#3 cancel fails brokerLost",
                                         "#4 status fails brokerLost", "reconnect"])
        XCTAssertTrue(harness.core.isIdle)
        XCTAssertNil(harness.core.nextWakeup)

        // The new connection has heard nothing yet.
        harness.clear()
        harness.submit("d")
        harness.advance(by: .milliseconds(300))
        XCTAssertEqual(harness.summary, ["#5 fails brokerUnreachable", "reconnect"])
    }

    func testABrokerNeverHeardIsUnreachable() {
        var harness = H(heartbeat: .milliseconds(100))
        harness.connected = false
        harness.submit("a")
        XCTAssertEqual(harness.core.nextWakeup, harness.now + .milliseconds(300))
        harness.advance(by: .milliseconds(300))
        XCTAssertEqual(harness.summary, ["#1 fails brokerUnreachable", "reconnect"])
        XCTAssertEqual(harness.sent.count, 0)
    }

    // MARK: Sync

    func testSyncFailsTheRequestsSentBeforeItThatTheBrokerNoLongerHolds() throws {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(2))
        harness.submit("a")
        harness.submit("b")
        harness.broker([H.accepted("a"), H.accepted("b")])
        harness.clear()
        harness.advance(by: .seconds(2), step: .milliseconds(100))
        XCTAssertEqual(harness.sentRequests, ["sync a,b"])
        let nonce = try XCTUnwrap(harness.lastSyncNonce)
        harness.submit("c")  // sent after the Sync: the reply says nothing about it
        harness.clear()
        harness.broker(H.syncReply(nonce: nonce, unknown: ["a", "c"]))
        XCTAssertEqual(harness.summary, ["#1 fails failed requestLost"])
        XCTAssertEqual(harness.core.routes.keys.sorted(), ["b", "c"])
        // A reply to a Sync that was not sent, or answered already, changes nothing.
        harness.broker(H.syncReply(nonce: nonce, unknown: ["b"]))
        XCTAssertEqual(harness.summary, ["#1 fails failed requestLost"])
    }

    func testNoSyncWhileNothingSentWaitsForAnAnswer() {
        var harness = H(sync: .milliseconds(500))
        harness.connected = false
        harness.submit("a")
        harness.advance(by: .seconds(2))
        XCTAssertEqual(harness.sentSummary, [])
    }

    func testACallWhoseAnswerWasLostIsAskedAgainAfterASync() throws {
        var harness = H(heartbeat: .seconds(1), sync: .seconds(2))
        harness.cancel("x")
        harness.status()
        XCTAssertEqual(harness.sentSummary, ["cancel x", "status"])
        harness.advance(by: .seconds(2), step: .milliseconds(500))
        XCTAssertEqual(harness.sentRequests, ["cancel x", "status", "sync"], "an empty Sync: only calls wait")
        // The reply comes with no answer before it: a reset connection lost them.
        let nonce = try XCTUnwrap(harness.lastSyncNonce)
        harness.clear()
        harness.broker(H.syncReply(nonce: nonce, unknown: []))
        XCTAssertEqual(harness.sentSummary, ["cancel x", "status"])
        harness.broker([H.cancelAck("x", .unknown), .statusReply(.init()), H.cancelAck("x", .unknown)])
        XCTAssertEqual(harness.summary, ["#1 cancel: unknown", "#2 status"], "answered once each")
        XCTAssertTrue(harness.core.isIdle)
    }

    // MARK: Timeouts and limits

    func testATimeoutFailsTheRequestLocallyAndItsLateFramesReachNobody() {
        var harness = H(heartbeat: .seconds(1))
        harness.submit("a", timeoutMs: 500)
        harness.broker(H.accepted("a"))
        harness.clear()
        harness.advance(by: .milliseconds(1400), step: .milliseconds(100))
        harness.advance(by: .milliseconds(99))
        XCTAssertEqual(harness.summary, [])
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.summary, ["#1 fails failed deadlineExceeded"], "one heartbeat interval after the timeout")
        XCTAssertEqual(harness.sentRequests, ["cancel a"])

        harness.submit("a")
        harness.clear()
        harness.broker([H.degraded("a"), H.cancelled("a"), H.cancelAck("a", .cancelled), H.accepted("a")])
        XCTAssertEqual(harness.summary, ["#2 accepted"], "the old request's frames went nowhere")
    }

    func testATimedOutRequestIsForgottenWithTheAnswerToItsCancel() {
        var harness = H(heartbeat: .seconds(1))
        harness.submit("a", timeoutMs: 100)
        harness.advance(by: .milliseconds(1100))
        XCTAssertEqual(harness.summary, ["#1 fails failed deadlineExceeded"])
        harness.broker(H.cancelAck("a", .unknown))  // the broker never had it (or its end was lost)
        XCTAssertTrue(harness.core.isIdle)
    }

    func testOversizeInputIsRefusedBeforeSendingAgainstTheBrokersLimit() {
        var harness = H(maxInputBytes: 100)
        harness.submit("big", image: Array(repeating: 0, count: 101))
        XCTAssertEqual(harness.summary, ["#1 fails rejected tooLarge"])
        XCTAssertEqual(harness.sent.count, 0)
        XCTAssertTrue(harness.core.isIdle)
        harness.submit("fits", image: Array(repeating: 0, count: 100))
        XCTAssertEqual(harness.sentSummary, ["submit fits"])
        harness.broker(.pong(H.pong(maxInputBytes: 10)))
        harness.submit("now too big", image: Array(repeating: 0, count: 11))
        XCTAssertEqual(harness.summary, ["#1 fails rejected tooLarge", "#3 fails rejected tooLarge"])
    }

    // MARK: Broker restarts

    func testARestartedBrokerGetsTheUnfinishedRequestsAgainInOrder() {
        var harness = H()
        harness.submit("a")
        harness.submit("b")
        harness.broker([H.accepted("a", instance: 1), H.accepted("b", instance: 1), H.degraded("a")])
        harness.status()
        harness.clear()
        harness.broker(.pong(H.pong(instance: 2)))
        XCTAssertEqual(harness.summary, [])
        XCTAssertEqual(harness.sentSummary, ["status", "submit a final", "submit b"],
                       "a's degraded was delivered: only its final is asked for")
        harness.broker([H.accepted("a", instance: 2), H.accepted("b", instance: 2), H.degraded("b"),
                        H.final("a"), H.final("b")])
        XCTAssertEqual(harness.summary, ["#2 degraded", "#1 final", "#2 final"], "no second Accepted")
    }

    func testARequestTheNewBrokerHadAlreadyIsNotAnsweredTwice() {
        var harness = H()
        harness.submit("a")
        harness.broker(H.accepted("a", instance: 1))
        harness.submit("b")  // reaches the new broker before the client knows it restarted
        harness.clear()
        harness.broker(H.accepted("b", instance: 2))
        XCTAssertEqual(harness.sentSummary, ["submit a", "submit b"])
        harness.broker([H.accepted("a", instance: 2), H.failed("b", .duplicateID), H.degraded("b"), H.final("b"),
                        H.final("a")])
        XCTAssertEqual(harness.summary, ["#2 accepted", "#2 degraded", "#2 final", "#1 final"])
    }

    func testARestartedBrokerFailsEverythingWhenResubmissionIsOff() {
        var harness = H(resubmit: false)
        harness.submit("a")
        harness.broker(H.accepted("a", instance: 1))
        harness.clear()
        harness.broker(H.syncReply(nonce: 99, unknown: [], instance: 2))
        XCTAssertEqual(harness.summary, ["#1 fails brokerLost", "reconnect"])
        XCTAssertTrue(harness.core.isIdle)
    }

    // MARK: Wakeups and closing

    func testNothingIsDueBeforeNextWakeup() {
        var harness = H(heartbeat: .seconds(1), sync: .milliseconds(700))
        XCTAssertNil(harness.core.nextWakeup)
        harness.submit("a", timeoutMs: 100)
        harness.submit("b")
        harness.broker([H.accepted("a"), H.accepted("b")])
        var seen = 0
        while let wakeup = harness.core.nextWakeup, seen < 20 {
            var early = harness.core
            XCTAssertEqual(early.tick(now: wakeup - .nanoseconds(1)), [])
            XCTAssertNil(early.nextMessage, "nothing queued before \(wakeup)")
            harness.advance(by: wakeup - harness.now)
            if harness.sentSummary.last == "ping" { harness.broker(.pong(H.pong())) }
            seen += 1
        }
        XCTAssert(harness.summary.contains("#1 fails failed deadlineExceeded"))
        XCTAssert(harness.sentRequests.contains("sync a,b"))
    }

    func testCloseFailsEverythingAndEveryLaterCommand() {
        var harness = H()
        harness.submit("a")
        harness.cancel("b")
        harness.status()
        harness.close()
        XCTAssertEqual(harness.summary, ["#1 fails closed", "#2 cancel fails closed", "#3 status fails closed"])
        harness.clear()
        harness.submit("c")
        harness.cancel("c")
        harness.status()
        XCTAssertEqual(harness.summary, ["#4 fails closed", "#5 cancel fails closed", "#6 status fails closed"])
        XCTAssertNil(harness.core.nextWakeup)
        XCTAssertEqual(harness.sent.count, 0)
    }
}
