// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {Vm} from "../base/Vm.sol";
import {SynclineSigning} from "../base/SynclineSigning.sol";
import {SynclineMarket} from "../../src/SynclineMarket.sol";
import {ISynclineTaskPosting} from "../../src/ISynclineTaskPosting.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    Tier,
    AggregationRule,
    Modality,
    RoundRecord,
    RoundStatus,
    TrainerRecord,
    WitnessRecord,
    Commitment,
    Vote
} from "../../src/SynclineTypes.sol";

/// @title MarketHandler
/// @notice Drives random but mostly well-formed sequences against one market: post a few tasks
/// (with or without a witness bond), enroll, start, bond witnesses, commit (signed by the trainer,
/// relayed by anyone), vote honestly or not (signed by the witness, also on finalized rounds),
/// carry forward, warp, seal, cancel, withdraw. A fixed set of actors holds every role, so every
/// credit lands on an account the invariants can see. Ghost state records what must never change.
contract MarketHandler is SynclineSigning {
    uint256 internal constant MAX_TASKS = 2;
    uint64 internal constant ROUND_DURATION = 1 hours;
    uint64 internal constant GRACE = 30 minutes;
    uint64 internal constant CHALLENGE = 2 hours;

    bytes32 internal constant CREDITED = keccak256("Credited(uint256,address,uint256,bytes32)");
    bytes32 internal constant FINALIZED = keccak256("RoundFinalized(uint256,uint32,bytes32,bytes32,bytes32,uint256)");
    bytes32 internal constant BONDED = keccak256("WitnessBonded(uint256,address,uint256)");
    bytes32 internal constant REASON_BOND = "bond-refund";
    bytes32 internal constant REASON_STAKE = "stake-refund";
    bytes32 internal constant REASON_REWARD = "reward";

    SynclineMarket public immutable market;
    uint256 public currentTime;

    address[] internal _sponsors;
    address[] internal _trainers;
    address[] internal _witnesses;
    address[] internal _actors;
    uint256[] internal _tasks;

    // ------------------------------------------------------------------ ghost state
    /// First finalized result per (task, round), as seen in the RoundFinalized event.
    mapping(uint256 => mapping(uint32 => bytes32)) public ghostFinal;
    /// A second RoundFinalized for a round, or a stored result that differs from the first one.
    uint256 public ghostRefinalized;
    uint256 public ghostResultChanged;
    /// A finalize with a different result than the finalized one that did not revert.
    uint256 public ghostConflictAccepted;
    /// An idempotent re-finalize that reverted, changed the round record or emitted something.
    uint256 public ghostIdempotenceBroken;
    /// Sum of Credited amounts, of withdrawn wei (measured on the receiver), per account too.
    uint256 public ghostCredited;
    uint256 public ghostWithdrawn;
    mapping(address => uint256) public creditedOf;
    mapping(address => uint256) public withdrawnOf;
    /// A withdraw that paid something other than the credit it held.
    uint256 public ghostBadWithdraw;
    /// Witness bonds: posted (WitnessBonded) and refunded (Credited "bond-refund") per (task, witness).
    mapping(uint256 => mapping(address => bool)) public bondedOnce;
    mapping(uint256 => mapping(address => uint256)) public bondPosted;
    mapping(uint256 => mapping(address => uint256)) public bondRefunded;
    /// A WitnessBonded event for a witness that was already bonded, or with another amount than the spec's.
    uint256 public ghostBadBond;
    /// What settlement credited each trainer: its stake refund and its reward, per (task, trainer).
    mapping(uint256 => mapping(address => uint256)) public stakeRefunded;
    mapping(uint256 => mapping(address => uint256)) public rewardPaid;

    /// Successful calls per action, and outcomes seen in the logs (to check that the sequences
    /// reach every part of the life cycle).
    mapping(bytes32 => uint256) public calls;
    mapping(bytes32 => uint256) public outcomes;

    constructor(SynclineMarket m) {
        require(CREDITED == ISynclineEvents.Credited.selector, "Credited topic");
        require(FINALIZED == ISynclineEvents.RoundFinalized.selector, "RoundFinalized topic");
        require(BONDED == ISynclineEvents.WitnessBonded.selector, "WitnessBonded topic");
        market = m;
        currentTime = block.timestamp;
        for (uint256 i = 0; i < 2; ++i) {
            _sponsors.push(_newActor(string.concat("sponsor", _digit(i))));
        }
        for (uint256 i = 0; i < 6; ++i) {
            _trainers.push(_newActor(string.concat("trainer", _digit(i))));
        }
        for (uint256 i = 0; i < 3; ++i) {
            _witnesses.push(_newActor(string.concat("witness", _digit(i))));
        }
    }

    function _digit(uint256 i) internal pure returns (string memory) {
        // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
        return string(abi.encodePacked(bytes1(uint8(48 + i))));
    }

    function _newActor(string memory name) internal returns (address a) {
        a = _keyedActor(string.concat("syncline-invariant", name));
        vm.deal(a, 1_000_000_000 ether);
        vm.label(a, name);
        _actors.push(a);
    }

    // ------------------------------------------------------------------ views for the invariants

    function actors() external view returns (address[] memory) {
        return _actors;
    }

    function tasks() external view returns (uint256[] memory) {
        return _tasks;
    }

    function witnessSet() external view returns (address[] memory) {
        return _witnesses;
    }

    // ------------------------------------------------------------------ plumbing

    modifier step(bytes32 name) {
        warpTo(currentTime);
        vm.recordLogs();
        _;
        _afterStep();
        calls[name] += 1;
    }

    function _advanceTo(uint256 t) internal {
        if (t > currentTime) {
            currentTime = t;
            warpTo(t);
        }
    }

    function _task(uint256 seed) internal view returns (bool ok, uint256 id) {
        if (_tasks.length == 0) return (false, 0);
        return (true, _tasks[seed % _tasks.length]);
    }

    function _honestRoots(uint256 id, uint32 round) internal pure returns (bytes32 root, bytes32 agg) {
        root = keccak256(abi.encode("honest-state", id, round));
        agg = keccak256(abi.encode("honest-aggregate", id, round));
    }

    /// @dev Books Credited/Withdrawn/RoundFinalized logs into the ghosts and rescans finalized rounds.
    function _afterStep() internal {
        Vm.Log[] memory logs = vm.getRecordedLogs();
        for (uint256 i = 0; i < logs.length; ++i) {
            if (logs[i].emitter != address(market)) continue;
            bytes32 topic = logs[i].topics[0];
            if (topic == CREDITED) {
                address account = address(uint160(uint256(logs[i].topics[2])));
                (uint256 amount, bytes32 reason) = abi.decode(logs[i].data, (uint256, bytes32));
                ghostCredited += amount;
                creditedOf[account] += amount;
                if (reason == REASON_BOND) {
                    bondRefunded[uint256(logs[i].topics[1])][account] += amount;
                    outcomes["bondRefunded"] += 1;
                }
                if (reason == REASON_STAKE) stakeRefunded[uint256(logs[i].topics[1])][account] += amount;
                if (reason == REASON_REWARD) rewardPaid[uint256(logs[i].topics[1])][account] += amount;
            } else if (topic == BONDED) {
                uint256 id = uint256(logs[i].topics[1]);
                address w = address(uint160(uint256(logs[i].topics[2])));
                uint256 amount = abi.decode(logs[i].data, (uint256));
                if (bondedOnce[id][w] || amount != market.getSpec(id).witnessBond) ghostBadBond += 1;
                bondedOnce[id][w] = true;
                bondPosted[id][w] += amount;
                outcomes["bonded"] += 1;
            } else if (topic == ISynclineEvents.TaskSealed.selector) {
                outcomes["sealed"] += 1;
            } else if (topic == ISynclineEvents.TaskCancelled.selector) {
                outcomes["cancelled"] += 1;
            } else if (topic == ISynclineEvents.TrainerEvicted.selector) {
                outcomes["evicted"] += 1;
            } else if (topic == ISynclineEvents.RoundCarriedForward.selector) {
                outcomes["carried"] += 1;
            } else if (topic == ISynclineEvents.DissentRecorded.selector) {
                outcomes["dissent"] += 1;
            } else if (topic == ISynclineEvents.Withdrawn.selector) {
                outcomes["withdrawn"] += 1;
            } else if (topic == FINALIZED) {
                outcomes["finalized"] += 1;
                uint256 id = uint256(logs[i].topics[1]);
                uint32 round = uint32(uint256(logs[i].topics[2]));
                (bytes32 result,,,) = abi.decode(logs[i].data, (bytes32, bytes32, bytes32, uint256));
                if (ghostFinal[id][round] != bytes32(0)) ghostRefinalized += 1;
                else ghostFinal[id][round] = result;
            }
        }
        for (uint256 t = 0; t < _tasks.length; ++t) {
            uint256 id = _tasks[t];
            uint32 rounds = market.getSpec(id).rounds;
            for (uint32 r = 0; r < rounds; ++r) {
                bytes32 g = ghostFinal[id][r];
                RoundRecord memory rr = market.getRound(id, r);
                if (g == bytes32(0)) {
                    if (rr.status == RoundStatus.Finalized) ghostResultChanged += 1; // finalized without event
                } else if (rr.status != RoundStatus.Finalized || rr.result != g) {
                    ghostResultChanged += 1;
                }
            }
        }
    }

    // ------------------------------------------------------------------ actions

    function postTask(uint256 sponsorSeed, uint256 pool, uint256 fee, uint256 stake, uint256 shape, uint256 bond)
        external
        step("postTask")
    {
        if (_tasks.length >= MAX_TASKS) return;
        TaskSpec memory s;
        s.specHash = keccak256(abi.encode("spec", _tasks.length));
        s.specURI = "ipfs://spec";
        s.modelHash = keccak256("model");
        s.datasetRoot = keccak256("data");
        s.initialStateRoot = keccak256(abi.encode("initial", _tasks.length));
        s.modality = Modality.TimeSeries;
        s.tier = Tier.Verified;
        s.rule = AggregationRule.CoordinateMedian;
        s.innerSteps = 100;
        s.rounds = uint32(bound(shape & 0xff, 1, 3));
        s.minTrainers = uint16(bound((shape >> 8) & 0xff, 1, 2));
        s.maxTrainers = uint16(bound((shape >> 16) & 0xff, s.minTrainers, 4));
        s.shardCount = uint16(bound((shape >> 24) & 0xff, s.maxTrainers, 13));
        s.maxMissedRounds = uint16(bound((shape >> 32) & 0xff, 0, 1));
        s.evictionSlashBps = uint16(bound((shape >> 40) & 0xffff, 0, 10_000));
        s.threshold = uint8(bound((shape >> 56) & 0xff, 1, 3));
        s.roundDuration = ROUND_DURATION;
        s.graceWindow = GRACE;
        s.challengeWindow = CHALLENGE;
        // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
        s.enrollmentDeadline = uint64(currentTime + 2 hours);
        s.trainerStake = uint128(bound(stake, 2, 5 ether));
        s.witnessFee = uint128(bound(fee, 0, 0.1 ether));
        s.outerLrPpm = 700_000;
        s.outerMomentumPpm = 900_000;
        s.gradientBits = 16;
        s.paramCount = uint64(bound((shape >> 64) & 0xffffffff, 1, 10_000_000));
        s.checkpointInterval = uint32(bound((shape >> 96) & 0xff, 1, s.innerSteps));
        // Every task asks a witness bond (1 wei to 2 ether): a spec without one is refused.
        s.witnessBond = uint128(bound(bond, 1, 2 ether));
        s.challengeBond = 0.1 ether;
        s.spotCheckPpm = 1_000_000;
        s.witnesses = _witnesses;
        uint256 budget = uint256(s.witnessFee) * s.threshold * s.rounds;
        // the deterrence rule at ppm 1e6: 2 * ceil(pool / (rounds * minTrainers)) <= stake
        pool = bound(pool, 1, uint256(s.rounds) * s.minTrainers * (s.trainerStake / 2));

        vm.prank(_sponsors[sponsorSeed % _sponsors.length]);
        uint256 id = ISynclineTaskPosting(address(market)).postTask{value: pool + budget}(s);
        _tasks.push(id);
    }

    function enroll(uint256 taskSeed, uint256 trainerSeed, uint8 count) external step("enroll") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        uint256 n = bound(count, 1, 4);
        uint128 stake = market.getSpec(id).trainerStake;
        for (uint256 i = 0; i < n; ++i) {
            address t = _trainers[(trainerSeed + i) % _trainers.length];
            vm.prank(t);
            try market.enroll{value: stake}(id) {} catch {}
        }
    }

    function startRun(uint256 taskSeed, bool advance) external step("startRun") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        if (advance) _advanceTo(uint256(market.getSpec(id).enrollmentDeadline) + 1);
        market.startRun(id);
    }

    function cancelUnderfilled(uint256 taskSeed, bool advance) external step("cancel") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        if (advance) _advanceTo(uint256(market.getSpec(id).enrollmentDeadline) + 1);
        market.cancelUnderfilled(id);
    }

    /// @dev `count` (1-3) witnesses, from `witnessSeed` on, post the task's bond; with `offBy` odd, one
    /// of them first tries a wrong amount (refused). Witnesses that are bonded or not in a bondable
    /// status are refused too.
    function bondWitness(uint256 taskSeed, uint256 witnessSeed, uint8 count, uint256 offBy) external step("bond") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        uint256 amount = market.getSpec(id).witnessBond;
        uint256 n = bound(count, 1, 3);
        for (uint256 j = 0; j < n; ++j) {
            address w = _witnesses[(witnessSeed + j) % _witnesses.length];
            if (j == 0 && offBy % 2 == 1) {
                uint256 wrong = amount + 1 + (offBy % 1 ether);
                vm.prank(w);
                try market.bondWitness{value: wrong}(id) {
                    ghostBadBond += 1;
                } catch {}
            }
            vm.prank(w);
            try market.bondWitness{value: amount}(id) {} catch {}
        }
    }

    /// @dev Every active trainer whose fragment bit is not in `skipMask` commits for the open round.
    function commit(uint256 taskSeed, uint256 skipMask) external step("commit") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        TaskState memory t = market.getTaskState(id);
        if (t.status != TaskStatus.Running) return;
        address[] memory ts = market.getTrainers(id);
        // Bits 8 and up pick who relays the signed commitments (anyone may).
        address relayer = _actors[(skipMask >> 8) % _actors.length];
        skipMask &= 0x5; // at most fragments 0 and 2 skip, so many rounds still get commits
        for (uint256 i = 0; i < ts.length; ++i) {
            if (skipMask & (uint256(1) << i) != 0) continue;
            Commitment memory c = Commitment({
                taskId: id,
                round: t.currentRound,
                // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
                fragment: uint16(i),
                payloadHash: keccak256(abi.encode("payload", id, t.currentRound, i)),
                chunkRoot: keccak256(abi.encode("chunks", id, t.currentRound, i)),
                checkpointRoot: keccak256(abi.encode("checkpoints", id, t.currentRound, i)),
                uri: "ipfs://grad"
            });
            bytes memory sig = _signCommitment(_keyOf(ts[i]), c, address(market));
            vm.prank(relayer);
            try market.commitSubmission(c, sig) {} catch {}
        }
    }

    /// @dev `count` (1-3) witnesses, starting at `witnessSeed`, vote in turn. `mode % 8` 0-5: the open
    /// round, 6-7: replay on an earlier (closed) round. Voter j offers a forked result when bits
    /// 2j..2j+1 of `forkBits` are both zero (one in four), the honest one otherwise.
    function vote(uint256 taskSeed, uint256 witnessSeed, uint8 mode, uint8 forkBits, uint256 maskSeed, bool advance)
        external
        step("vote")
    {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        TaskState memory t = market.getTaskState(id);
        if (t.status == TaskStatus.Enrolling || t.status == TaskStatus.Cancelled) return;
        uint32 round = t.currentRound;
        if (mode % 8 >= 6) {
            if (t.status == TaskStatus.Running && round == 0) return;
            // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
            round = uint32(maskSeed % (t.status == TaskStatus.Running ? round : round + 1));
        }
        if (advance && t.status == TaskStatus.Running) {
            _advanceTo(uint256(t.roundOpenedAt) + market.getSpec(id).roundDuration + 1);
        }
        uint256 count = bound(mode >> 3, 1, 3);
        for (uint256 j = 0; j < count; ++j) {
            bool forked = (forkBits >> (2 * j)) & 3 == 0;
            _voteOnce(id, round, _witnesses[(witnessSeed + j) % _witnesses.length], forked, maskSeed);
        }
    }

    function _voteOnce(uint256 id, uint32 round, address w, bool forked, uint256 maskSeed) internal {
        RoundRecord memory before = market.getRound(id, round);
        (bytes32 root, bytes32 agg) = _honestRoots(id, round);
        uint256 mask = before.committedMask;
        if (forked) {
            root = keccak256(abi.encode("forked-state", id, round, maskSeed % 2));
            mask = before.committedMask & maskSeed;
        }
        bytes32 offered = keccak256(abi.encode(root, agg, mask));
        Vote memory v = Vote({
            taskId: id,
            round: round,
            prevStateRoot: before.status == RoundStatus.Finalized
                ? before.prevStateRoot
                : market.getTaskState(id).stateRoot,
            stateRoot: root,
            aggregateRoot: agg,
            acceptedMask: mask,
            metric: maskSeed % 1e6
        });
        bytes memory sig = _signVote(_keyOf(w), v, address(market));
        // Book what earlier calls of this step logged, so that a replay's own logs can be told apart.
        _afterStep();
        vm.recordLogs();
        // The witness relays its own vote, or (maskSeed bit 8) a trainer relays it.
        vm.prank((maskSeed >> 8) & 1 == 0 ? w : _trainers[(maskSeed >> 9) % _trainers.length]);
        try market.finalizeRound(v, sig) {
            if (before.status == RoundStatus.Finalized) {
                if (offered != before.result) ghostConflictAccepted += 1;
                if (keccak256(abi.encode(market.getRound(id, round))) != keccak256(abi.encode(before))) {
                    ghostIdempotenceBroken += 1;
                }
                if (vm.getRecordedLogs().length != 0) ghostIdempotenceBroken += 1;
                outcomes["idempotent"] += 1;
            }
        } catch (bytes memory err) {
            // Repeating the finalized result must succeed (idempotence), in any later task status.
            if (before.status == RoundStatus.Finalized && offered == before.result) ghostIdempotenceBroken += 1;
            // forge-lint: disable-next-line(unsafe-typecast) -- takes the selector of the revert data
            if (bytes4(err) == ISynclineEvents.ConflictingFinalize.selector) outcomes["conflictRejected"] += 1;
            // forge-lint: disable-next-line(unsafe-typecast) -- takes the selector of the revert data
            if (bytes4(err) == ISynclineEvents.SynclineWitnessUnbonded.selector) outcomes["unbondedVote"] += 1;
        }
    }

    function carryForward(uint256 taskSeed, bool advance) external step("carryForward") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        TaskState memory t = market.getTaskState(id);
        if (advance && t.status == TaskStatus.Running) {
            TaskSpec memory s = market.getSpec(id);
            _advanceTo(uint256(t.roundOpenedAt) + s.roundDuration + s.graceWindow + 1);
        }
        market.carryForward(id, t.currentRound);
    }

    function seal(uint256 taskSeed, bool advance) external step("seal") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        if (advance) _advanceTo(uint256(market.getTaskState(id).lastClosedAt) + market.getSpec(id).challengeWindow);
        market.seal(id);
    }

    function withdraw(uint256 actorSeed) external step("withdraw") {
        address a = _actors[actorSeed % _actors.length];
        uint256 credit = market.creditOf(a);
        uint256 balanceBefore = a.balance;
        vm.prank(a);
        try market.withdraw() {
            uint256 paid = a.balance - balanceBefore;
            if (paid != credit || credit == 0) ghostBadWithdraw += 1;
            ghostWithdrawn += paid;
            withdrawnOf[a] += paid;
        } catch {}
    }

    function warp(uint256 dt) external step("warp") {
        _advanceTo(currentTime + bound(dt, 1, 3 hours));
    }
}
