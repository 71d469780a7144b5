// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {CourtTestBase} from "./CourtTestBase.sol";
import {MerkleRef} from "./MerkleRef.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    AggregationRule,
    RoundRecord,
    RoundStatus,
    TrainerRecord,
    Commitment,
    Vote,
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "../../src/SynclineTypes.sol";

/// @title CourtHandler
/// @notice Drives the market and its court through random but mostly valid sequences: the run
/// (commit, finalize, carry forward, seal, new tasks), the cheap challenge kinds (trainer and
/// witness equivocation, censorship claim / answer / resolve, training claim / referee votes /
/// expiry) and withdrawals. Every call bounds its inputs onto the live state and returns early
/// when there is nothing sensible to do; a call that still reverts changes nothing.
contract CourtHandler is CourtTestBase {
    uint256 public current;
    uint256 public calls;
    mapping(bytes4 => uint256) public succeeded;
    /// Chunk index + 1 of the malformed chunk in a submission (0: well formed).
    mapping(uint256 => mapping(uint32 => mapping(uint16 => uint256))) public malformedAt;
    /// Censorship claims already taken (a fault key is claimed once).
    mapping(uint256 => mapping(uint32 => mapping(uint16 => bool))) internal claimed;
    mapping(uint256 => mapping(address => bool)) internal refereed;

    /// Honest actors: trainer 0 commits well-formed work every round and never equivocates;
    /// witness 2 never equivocates and defends every claim against a round it voted, like the
    /// witness agent (answers a malformed chunk, else demands availability). The committee is
    /// honest about honest work (training claims against trainer 0 get innocent votes).
    uint16 internal constant HONEST_TRAINER = 0;
    uint256 internal constant HONEST_WITNESS = 2;
    /// What seal paid the honest trainer short of its stake plus its recorded reward (must stay 0).
    uint256 public honestTrainerShortfall;
    /// Seals at which the honest trainer was checked.
    uint256 public honestSeals;

    constructor() {
        setUp();
        _newTask();
    }

    // ------------------------------------------------------------------ views for the invariants

    function allTasks() external view returns (uint256[] memory) {
        return tasks;
    }

    function allActors() external view returns (address[] memory) {
        return everyone;
    }

    function allWitnesses() external view returns (address[] memory) {
        return witnesses;
    }

    function marketAddress() external view returns (address) {
        return address(market);
    }

    function honestTrainer() external view returns (address) {
        return trainers[HONEST_TRAINER];
    }

    function honestWitness() external view returns (address) {
        return witnesses[HONEST_WITNESS];
    }

    /// @dev The honest trainer commits its well-formed work as soon as a round is open (every
    /// action starts with this, so no warp can make it miss a deadline).
    function _honestCommit() internal {
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running) return;
        if (block.timestamp > uint256(t.roundOpenedAt) + ROUND_DURATION) return;
        if (market.getTrainer(current, trainers[HONEST_TRAINER]).evicted) return;
        if ((market.getRound(current, t.currentRound).committedMask >> HONEST_TRAINER) & 1 == 1) return;
        malformedAt[current][t.currentRound][HONEST_TRAINER] = 0;
        _commit(current, t.currentRound, HONEST_TRAINER, _root(_chunks(t.currentRound, HONEST_TRAINER, 0)));
    }

    /// @dev The honest witness defends claim `id` if it voted the claimed round's result.
    function _honestDefence(uint256 id) internal {
        Challenge memory c = court.getChallenge(id);
        if (c.status != ChallengeStatus.Open || block.timestamp > c.deadline) return;
        address w = witnesses[HONEST_WITNESS];
        if (court.voteOf(c.taskId, c.round, w) != market.getRound(c.taskId, c.round).result) return;
        uint256 bad = malformedAt[c.taskId][c.round][c.fragment];
        if (bad != 0) {
            bytes[] memory chunks = _chunks(c.round, c.fragment, bad);
            vm.prank(w);
            court.answerCensorship(id, uint32(bad - 1), chunks[bad - 1], MerkleRef.proof(MerkleRef.hashes(chunks), bad - 1));
        } else if (!court.demandedBy(id, w)) {
            vm.prank(w);
            court.demandAvailability(id, uint32(id % CHUNKS));
        }
    }

    // ------------------------------------------------------------------ task and round helpers

    function _newTask() internal {
        TaskSpec memory s = _spec(AggregationRule.Mean);
        s.rounds = 6;
        s.maxMissedRounds = 1;
        s.challengeWindow = 3 days;
        current = _start(s);
    }

    function _state() internal view returns (TaskState memory) {
        return market.getTaskState(current);
    }

    function _chunks(uint32 round, uint16 f, uint256 bad) internal pure returns (bytes[] memory c) {
        c = _gradChunks(round, f);
        if (bad != 0) c[bad - 1] = _malform(c[bad - 1], (round + f) % 6);
    }

    /// @dev A closed round of the current task still inside its challenge window, or type(uint32).max.
    function _closedRound(uint256 seed) internal view returns (uint32) {
        TaskState memory t = _state();
        uint32 closed = t.status == TaskStatus.Running ? t.currentRound : market.getSpec(current).rounds;
        if (closed == 0) return type(uint32).max;
        return uint32(seed % closed);
    }

    function _bondedWitnesses() internal view returns (uint256[] memory out, uint256 n) {
        out = new uint256[](witnesses.length);
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (market.getWitness(current, witnesses[i]).bond != 0) out[n++] = i;
        }
    }

    function _ok(bytes4 sel) internal {
        ++succeeded[sel];
    }

    // ------------------------------------------------------------------ the run

    function commit(uint8 fragmentSeed, uint8 badSeed) external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running) return;
        uint16 f = uint16(fragmentSeed % N_TRAINERS);
        if (f == HONEST_TRAINER) return;
        if (block.timestamp > uint256(t.roundOpenedAt) + ROUND_DURATION) return;
        if (market.getTrainer(current, trainers[f]).evicted) return;
        if ((market.getRound(current, t.currentRound).committedMask >> f) & 1 == 1) return;
        uint256 bad = badSeed % 4; // 0: well formed, 1..3: that chunk malformed
        malformedAt[current][t.currentRound][f] = bad;
        _commit(current, t.currentRound, f, _root(_chunks(t.currentRound, f, bad)));
        _ok(this.commit.selector);
    }

    function finalize(uint8 maskSeed, uint8 rootSeed, uint8 pairSeed) external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running) return;
        (uint256[] memory bonded, uint256 n) = _bondedWitnesses();
        if (n < THRESHOLD) return;
        uint256 a = pairSeed % n;
        uint256 b = (a + 1 + (pairSeed / 8) % (n - 1)) % n;
        uint32 round = t.currentRound;
        uint256 committed = market.getRound(current, round).committedMask;
        uint256 mask = committed & uint256(maskSeed);
        uint256 deadline = uint256(t.roundOpenedAt) + ROUND_DURATION;
        uint256 graceEnd = deadline + GRACE;
        if (block.timestamp <= deadline) warpTo(deadline + 1);
        if (block.timestamp > graceEnd + 1 days) return; // let carryForward have it
        bytes32 root = keccak256(abi.encode("state", rootSeed % 3));
        _vote(current, round, bonded[a], root, mask);
        if (market.getRound(current, round).status != RoundStatus.Finalized) {
            _vote(current, round, bonded[b], root, mask);
        }
        _ok(this.finalize.selector);
    }

    /// @dev A whole round in one call: the `commitSeed` fragments commit (those in `badSeed`
    /// with one malformed chunk), then two bonded witnesses finalize `acceptSeed & committed`,
    /// or the round is carried forward when fewer than two bonds are left.
    function playRound(uint8 commitSeed, uint8 acceptSeed, uint8 badSeed, uint8 rootSeed) external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running) return;
        uint32 round = t.currentRound;
        if (block.timestamp <= uint256(t.roundOpenedAt) + ROUND_DURATION) {
            uint256 committed = market.getRound(current, round).committedMask;
            for (uint16 f = 0; f < N_TRAINERS; ++f) {
                if ((commitSeed >> f) & 1 == 0 || (committed >> f) & 1 == 1 || f == HONEST_TRAINER) continue;
                if (market.getTrainer(current, trainers[f]).evicted) continue;
                uint256 bad = (badSeed >> f) & 1 == 1 ? 1 + (f + round) % 3 : 0;
                malformedAt[current][round][f] = bad;
                _commit(current, round, f, _root(_chunks(round, f, bad)));
            }
        }
        (uint256[] memory bonded, uint256 n) = _bondedWitnesses();
        if (n < THRESHOLD) {
            _carry(current, round);
            _ok(this.playRound.selector);
            return;
        }
        _pastDeadline(current);
        uint256 mask = market.getRound(current, round).committedMask & uint256(acceptSeed);
        bytes32 root = keccak256(abi.encode("state", rootSeed % 3));
        uint256 a = rootSeed % n;
        _vote(current, round, bonded[a], root, mask);
        if (market.getRound(current, round).status != RoundStatus.Finalized) {
            _vote(current, round, bonded[(a + 1) % n], root, mask);
        }
        _ok(this.playRound.selector);
    }

    function carryForward() external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running) return;
        _carry(current, t.currentRound);
        _ok(this.carryForward.selector);
    }

    function warp(uint32 dt) external {
        ++calls;
        _honestCommit();
        warpTo(block.timestamp + bound(dt, 0, 6 hours));
    }

    function seal() external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.AwaitingSeal || t.openChallenges != 0) return;
        uint256 until = uint256(t.lastClosedAt) + market.getSpec(current).challengeWindow;
        if (block.timestamp < until) warpTo(until);
        address h = trainers[HONEST_TRAINER];
        uint256 before = market.creditOf(h);
        market.seal(current);
        TrainerRecord memory r = market.getTrainer(current, h);
        uint256 got = market.creditOf(h) - before;
        uint256 owed = uint256(STAKE) + r.reward;
        if (got < owed) honestTrainerShortfall += owed - got;
        ++honestSeals;
        _ok(this.seal.selector);
        _newTask();
    }

    function withdraw(uint8 who) external {
        ++calls;
        _honestCommit();
        address a = everyone[who % everyone.length];
        if (market.creditOf(a) == 0) return;
        vm.prank(a);
        market.withdraw();
        _ok(this.withdraw.selector);
    }

    // ------------------------------------------------------------------ equivocation

    function trainerEquivocation(uint8 fragmentSeed, uint8 roundSeed) external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running && t.status != TaskStatus.AwaitingSeal) return;
        uint16 f = uint16(fragmentSeed % N_TRAINERS);
        uint32 round = roundSeed % 2 == 0 && t.status == TaskStatus.Running ? t.currentRound : _closedRound(roundSeed);
        if (round == type(uint32).max) return;
        if (f == HONEST_TRAINER || market.getTrainer(current, trainers[f]).stake == 0) return;
        // Mostly keep at least three trainers active, so the run stays interesting.
        if (_state().active <= 3 && roundSeed % 4 != 0) return;
        Commitment memory a = _commitment(current, round, f, keccak256(abi.encode("eq-a", round)));
        Commitment memory b = _commitment(current, round, f, keccak256(abi.encode("eq-b", round)));
        bytes memory sa = _signC(trainers[f], a);
        bytes memory sb = _signC(trainers[f], b);
        vm.prank(challenger);
        court.proveTrainerEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _ok(this.trainerEquivocation.selector);
    }

    function witnessEquivocation(uint8 witnessSeed, uint8 roundSeed) external {
        ++calls;
        _honestCommit();
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running && t.status != TaskStatus.AwaitingSeal) return;
        uint256 w = witnessSeed % witnesses.length;
        if (w == HONEST_WITNESS) return;
        uint32 round = roundSeed % 2 == 0 && t.status == TaskStatus.Running ? t.currentRound : _closedRound(roundSeed);
        if (round == type(uint32).max) return;
        if (market.getWitness(current, witnesses[w]).bond == 0) return;
        // Mostly keep a bonded quorum, so rounds keep finalizing.
        (, uint256 bondedCount) = _bondedWitnesses();
        if (bondedCount <= THRESHOLD && roundSeed % 4 != 0) return;
        Vote memory a = Vote(current, round, bytes32(0), keccak256("va"), bytes32(0), 1, 0);
        Vote memory b = Vote(current, round, bytes32(0), keccak256("vb"), bytes32(0), 1, 0);
        bytes memory sa = _signV(witnesses[w], a);
        bytes memory sb = _signV(witnesses[w], b);
        vm.prank(challenger);
        court.proveWitnessEquivocation{value: CHALLENGE_BOND}(a, sa, b, sb);
        _ok(this.witnessEquivocation.selector);
    }

    // ------------------------------------------------------------------ censorship

    function challengeCensorship(uint8 roundSeed, uint8 fragmentSeed) external {
        ++calls;
        _honestCommit();
        (uint32 round, uint16 f, bool found) = _target(roundSeed, fragmentSeed, false);
        if (!found) return;
        claimed[current][round][f] = true;
        uint256 id = _challengeCensorship(current, round, f);
        _honestDefence(id);
        _ok(this.challengeCensorship.selector);
    }

    /// @dev Scans the current task's finalized rounds still in their window (from a random
    /// start) for a fragment left out (`accepted` false) or accepted and not revoked (true),
    /// whose claim is not taken yet.
    function _target(uint8 roundSeed, uint8 fragmentSeed, bool accepted)
        internal
        view
        returns (uint32 round, uint16 fragment, bool found)
    {
        TaskState memory t = _state();
        if (t.status != TaskStatus.Running && t.status != TaskStatus.AwaitingSeal) return (0, 0, false);
        uint32 closed = t.status == TaskStatus.Running ? t.currentRound : market.getSpec(current).rounds;
        uint64 window = market.getSpec(current).challengeWindow;
        for (uint32 k = 0; k < closed; ++k) {
            round = uint32((uint256(roundSeed) + k) % closed);
            RoundRecord memory rr = market.getRound(current, round);
            if (rr.status != RoundStatus.Finalized || block.timestamp > uint256(rr.closedAt) + window) continue;
            uint256 candidates = accepted ? rr.acceptedMask & ~rr.revokedMask : rr.committedMask & ~rr.acceptedMask;
            for (uint16 j = 0; j < N_TRAINERS; ++j) {
                fragment = uint16((uint256(fragmentSeed) + j) % N_TRAINERS);
                if ((candidates >> fragment) & 1 == 0) continue;
                if (!accepted && claimed[current][round][fragment]) continue;
                return (round, fragment, true);
            }
        }
        return (0, 0, false);
    }

    /// @dev The id of an open challenge of `kind` (scanning from a random start), or 0.
    function _openChallenge(uint256 seed, ChallengeKind kind) internal view returns (uint256) {
        uint256 n = court.challengeCount();
        if (n == 0) return 0;
        for (uint256 k = 0; k < n; ++k) {
            uint256 id = 1 + (seed + k) % n;
            Challenge memory c = court.getChallenge(id);
            if (c.kind == kind && c.status == ChallengeStatus.Open) return id;
        }
        return 0;
    }

    function answerCensorship(uint8 idSeed) external {
        ++calls;
        _honestCommit();
        uint256 n = court.challengeCount();
        for (uint256 k = 0; k < n; ++k) {
            uint256 id = 1 + (uint256(idSeed) + k) % n;
            Challenge memory c = court.getChallenge(id);
            if (c.kind != ChallengeKind.Censorship || c.status != ChallengeStatus.Open) continue;
            uint256 bad = malformedAt[c.taskId][c.round][c.fragment];
            if (bad == 0 || block.timestamp > c.deadline) continue;
            address voter = _voterOf(c);
            if (voter == address(0)) continue;
            bytes[] memory chunks = _chunks(c.round, c.fragment, bad);
            bytes32[] memory proof = MerkleRef.proof(MerkleRef.hashes(chunks), bad - 1);
            vm.prank(voter);
            court.answerCensorship(id, uint32(bad - 1), chunks[bad - 1], proof);
            _ok(this.answerCensorship.selector);
            return;
        }
    }

    /// @dev A voter of the claim's round result other than the claimant (or zero).
    function _voterOf(Challenge memory c) internal view returns (address) {
        bytes32 result = market.getRound(c.taskId, c.round).result;
        for (uint256 i = 0; i < witnesses.length; ++i) {
            if (court.voteOf(c.taskId, c.round, witnesses[i]) == result) return witnesses[i];
        }
        return address(0);
    }

    /// @dev A (dishonest or lazy) voter of a claimed round demands availability.
    function demandAvailability(uint8 idSeed, uint8 witnessSeed) external {
        ++calls;
        _honestCommit();
        uint256 id = _openChallenge(idSeed, ChallengeKind.Censorship);
        if (id == 0) return;
        Challenge memory c = court.getChallenge(id);
        if (block.timestamp > c.deadline) return;
        bytes32 result = market.getRound(c.taskId, c.round).result;
        address w = witnesses[witnessSeed % witnesses.length];
        if (court.voteOf(c.taskId, c.round, w) != result || court.demandedBy(id, w)) return;
        vm.prank(w);
        court.demandAvailability(id, uint32(witnessSeed % CHUNKS));
        _ok(this.demandAvailability.selector);
    }

    /// @dev The accused trainer opens the demanded chunk (well formed or not) in time.
    function answerAvailability(uint8 idSeed) external {
        ++calls;
        _honestCommit();
        uint256 id = _openChallenge(idSeed, ChallengeKind.Censorship);
        if (id == 0) return;
        (uint64 d, uint32 ci,, bool answered,) = court.availabilityDemand(id);
        if (d == 0 || answered || block.timestamp > d) return;
        Challenge memory c = court.getChallenge(id);
        bytes[] memory chunks = _chunks(c.round, c.fragment, malformedAt[c.taskId][c.round][c.fragment]);
        vm.prank(trainers[c.fragment]);
        court.answerAvailability(id, chunks[ci], MerkleRef.proof(MerkleRef.hashes(chunks), ci));
        _ok(this.answerAvailability.selector);
    }

    uint256 internal constant BLOCK_GAS = 30_000_000;
    /// Closing calls (resolve, expire, continue a rollback) that failed or needed more than a block.
    uint256 public lockedCalls;
    uint256 public closedByCloseAll;

    /// @dev Sends a closing call with at most a block's gas; a failure is a locked escrow.
    function _mustClose(bytes memory data) internal {
        (bool ok,) = address(market).call{gas: BLOCK_GAS - 50_000}(data);
        if (!ok) ++lockedCalls;
        else ++closedByCloseAll;
    }

    /// @dev Escrow is never locked: past every deadline, every open claim of the current task
    /// closes and every pending rollback finishes, each call within a block's gas.
    function closeAll(uint8 seed) external {
        ++calls;
        if (seed % 4 != 0) return; // mostly let the games play out
        uint256 n = court.challengeCount();
        for (uint256 id = 1; id <= n; ++id) {
            Challenge memory c = court.getChallenge(id);
            if (c.taskId != current || c.status != ChallengeStatus.Open) continue;
            uint256 until = c.deadline;
            (uint64 respondBy,,, bool answered,) = court.availabilityDemand(id);
            if (c.kind == ChallengeKind.TrainingFraud && !answered) until = respondBy; // silence convicts
            else if (respondBy > until) until = respondBy;
            if (block.timestamp <= until) warpTo(until + 1);
            _mustClose(
                c.kind == ChallengeKind.Censorship
                    ? abi.encodeCall(court.resolveCensorship, (id))
                    : abi.encodeCall(court.expireChallenge, (id))
            );
        }
        for (uint256 k = 0; k < 64; ++k) {
            (, uint32 next, uint32 end) = court.invalidation(current);
            if (next == end) break;
            _mustClose(abi.encodeCall(court.continueInvalidation, (current)));
        }
        if (_state().openChallenges != 0) ++lockedCalls;
        _ok(this.closeAll.selector);
    }

    /// @dev Anyone carries a pending rollback one batch further.
    function continueInvalidation() external {
        ++calls;
        _honestCommit();
        (, uint32 next, uint32 end) = court.invalidation(current);
        if (next == end) return;
        court.continueInvalidation(current);
        _ok(this.continueInvalidation.selector);
    }

    function resolveCensorship(uint8 idSeed) external {
        ++calls;
        _honestCommit();
        uint256 id = _openChallenge(idSeed, ChallengeKind.Censorship);
        if (id == 0) return;
        uint64 deadline = court.getChallenge(id).deadline;
        (uint64 respondBy,,, bool answered,) = court.availabilityDemand(id);
        if (!answered && respondBy > deadline) deadline = respondBy;
        if (block.timestamp <= deadline) {
            if (idSeed % 3 != 0) return; // mostly leave time for an answer
            warpTo(uint256(deadline) + 1);
        }
        court.resolveCensorship(id);
        _ok(this.resolveCensorship.selector);
    }

    // ------------------------------------------------------------------ training

    function challengeTraining(uint8 roundSeed, uint8 fragmentSeed, uint8 segmentSeed) external {
        ++calls;
        _honestCommit();
        (uint32 round, uint16 f, bool found) = _target(roundSeed, fragmentSeed, true);
        if (!found) return;
        uint256 id = _challengeTraining(current, round, f, uint32(segmentSeed % 11));
        // The honest trainer's agent answers every claim against it at once (it keeps its
        // checkpoints and publishes the segment); the others may stay silent.
        Challenge memory c = court.getChallenge(id);
        if (c.accused == trainers[HONEST_TRAINER]) {
            vm.prank(c.accused);
            court.answerTraining(id);
        }
        _ok(this.challengeTraining.selector);
    }

    /// @dev A (dishonest) accused trainer answers its training claim, if still in time.
    function answerTraining(uint8 idSeed) external {
        ++calls;
        _honestCommit();
        uint256 id = _openChallenge(idSeed, ChallengeKind.TrainingFraud);
        if (id == 0) return;
        (uint64 respondBy,,, bool answered,) = court.availabilityDemand(id);
        if (answered || block.timestamp > respondBy) return;
        vm.prank(court.getChallenge(id).accused);
        court.answerTraining(id);
        _ok(this.answerTraining.selector);
    }

    function refereeVote(uint8 idSeed, uint8 witnessSeed, bool guilty) external {
        ++calls;
        _honestCommit();
        uint256 id = _openChallenge(idSeed, ChallengeKind.TrainingFraud);
        if (id == 0) return;
        Challenge memory c = court.getChallenge(id);
        if (block.timestamp > c.deadline) return;
        for (uint256 k = 0; k < witnesses.length; ++k) {
            address w = witnesses[(witnessSeed + k) % witnesses.length];
            if (refereed[id][w] || market.getWitness(c.taskId, w).bond == 0) continue;
            refereed[id][w] = true;
            vm.prank(w);
            court.refereeVote(id, c.accused == trainers[HONEST_TRAINER] ? false : guilty);
            _ok(this.refereeVote.selector);
            return;
        }
    }

    function expireChallenge(uint8 idSeed) external {
        ++calls;
        _honestCommit();
        uint256 id = _openChallenge(idSeed, ChallengeKind.TrainingFraud);
        if (id == 0) return;
        uint64 deadline = court.getChallenge(id).deadline;
        (uint64 respondBy,,, bool answered,) = court.availabilityDemand(id);
        if (!answered) deadline = respondBy; // silence convicts once the response window is over
        if (block.timestamp <= deadline) {
            if (idSeed % 3 != 0) return; // mostly leave time for the referees
            warpTo(uint256(deadline) + 1);
        }
        court.expireChallenge(id);
        _ok(this.expireChallenge.selector);
    }
}
