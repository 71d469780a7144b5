// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {AggregationTestBase} from "./AggregationFraud.t.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {TaskSpec, AggregationRule, RoundStatus, Vote} from "../../src/SynclineTypes.sol";

/// @notice Finding 4: votes commit to the round's previous state root. A rollback while a round
/// is open (a proven fault in an earlier round) makes the votes already cast stale: they stop
/// counting toward quorum, and their witnesses vote again on the restored root — which is no
/// equivocation, since equivocation is two different signed votes for one (task, round, prevStateRoot).
contract StaleVotesTest is AggregationTestBase {
    uint256 internal task;
    bytes32 internal badRoot;
    bytes32 internal constant R1 = keccak256("round 1 result");

    /// Witnesses 0 and 1 finalize a tampered round 0; round 1 opens on the bad root and witness 2
    /// votes there; then the fraud is proven and the state root rolls back to the initial one.
    function setUp() public override {
        super.setUp();
        witnesses.push(_actor("witness3"));
        witnesses.push(_actor("witness4"));
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.witnesses = _witnessArray();
        task = _start(s);
        _commitAll(task, 0, ALL);
        bytes[] memory honest0 = _honestState(s, 0, ALL, _initialState());
        bytes[] memory claimed0 = _tamper(honest0, 0, 0, false, 1 << 30);
        badRoot = _root(claimed0);
        _finalize(task, 0, badRoot, ALL);
        _commitAll(task, 1, ALL);
        _pastDeadline(task);
        _vote(task, 1, 2, R1, ALL);
        vm.assertEq(market.getRound(task, 1).prevStateRoot, badRoot, "round 1 votes built on the bad root");
        vm.prank(challenger);
        court.proveAggregationFraud{value: CHALLENGE_BOND}(
            _aggProof(task, 0, 0, 0, 1, _inputs(0, ALL), _initialState(), claimed0)
        );
        vm.assertEq(market.getTaskState(task).stateRoot, _initialStateRoot(), "rolled back");
    }

    /// The vote cast before the rollback no longer counts: the same result from one more witness
    /// is one vote, not a quorum of two.
    function test_finalizeRound_voteBeforeRollback_noLongerCounts() public {
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.VotesDiscarded(task, 1, badRoot, _initialStateRoot());
        _vote(task, 1, 3, R1, ALL);
        vm.assertEq(uint256(market.getRound(task, 1).status), uint256(RoundStatus.Pending), "stale vote counted");
        vm.assertEq(uint256(market.getRound(task, 1).voteCount), 1, "only the new vote");
        vm.assertEq(market.getRound(task, 1).prevStateRoot, _initialStateRoot(), "votes now build on the restored root");
        vm.assertEq(court.voteOf(task, 1, witnesses[2]), bytes32(0), "the stale vote is gone");
    }

    /// A vote still signed on the replaced root is refused with both roots.
    function test_finalizeRound_staleRootVote_reverts() public {
        Vote memory v = _voteMsg(task, 1, R1, ALL);
        v.prevStateRoot = badRoot;
        bytes memory sig = _signV(witnesses[3], v);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongPrevStateRoot.selector, badRoot, _initialStateRoot())
        );
        market.finalizeRound(v, sig);
    }

    /// The witness whose vote went stale votes again on the restored root (a different result
    /// here), the quorum forms from fresh votes only, and its two signed votes are no equivocation.
    function test_finalizeRound_revoteAfterRollback_isNoEquivocation() public {
        Vote memory stale = _voteMsg(task, 1, R1, ALL);
        stale.prevStateRoot = badRoot;
        stale.metric = 1_000_000;
        bytes memory staleSig = _signV(witnesses[2], stale);
        bytes32 fresh = keccak256("round 1 on the restored root");
        _vote(task, 1, 2, fresh, ALL);
        _vote(task, 1, 3, fresh, ALL);
        vm.assertEq(uint256(market.getRound(task, 1).status), uint256(RoundStatus.Finalized), "fresh quorum");
        vm.assertEq(market.getRound(task, 1).prevStateRoot, _initialStateRoot(), "built on the restored root");
        Vote memory again = _voteMsg(task, 1, fresh, ALL);
        again.metric = 1_000_000;
        bytes memory againSig = _signV(witnesses[2], again);
        vm.prank(challenger);
        vm.expectRevert(ISynclineEvents.SynclineNotEquivocation.selector);
        court.proveWitnessEquivocation{value: CHALLENGE_BOND}(stale, staleSig, again, againSig);
        vm.assertEq(market.getWitness(task, witnesses[2]).bond, WITNESS_BOND, "bond intact");
        _assertMoney();
    }
}
