// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "../base/TestBase.sol";
import {Vm} from "../base/Vm.sol";
import {SynclineMarket} from "../../src/SynclineMarket.sol";
import {ISynclineMarket} from "../../src/ISynclineMarket.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    Tier,
    AggregationRule,
    Modality,
    RoundRecord,
    RoundStatus,
    TrainerRecord
} from "../../src/SynclineTypes.sol";

/// @title MarketHandler
/// @notice Drives random but mostly well-formed sequences against one market: post a few tasks,
/// enroll, start, commit, vote honestly or not (also on finalized rounds), carry forward, warp,
/// seal, cancel, withdraw. A fixed set of actors holds every role, so every credit lands on an
/// account the invariants can see. Ghost state records what must never change.
contract MarketHandler is TestBase {
    uint256 internal constant MAX_TASKS = 2;
    uint64 internal constant ROUND_DURATION = 1 hours;
    uint64 internal constant GRACE = 30 minutes;
    uint64 internal constant CHALLENGE = 2 hours;

    bytes32 internal constant CREDITED = keccak256("Credited(uint256,address,uint256,bytes32)");
    bytes32 internal constant FINALIZED = keccak256("RoundFinalized(uint256,uint32,bytes32,bytes32,bytes32,uint256)");

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

    /// Successful calls per action, and outcomes seen in the logs (to check that the sequences
    /// reach every part of the life cycle).
    mapping(bytes32 => uint256) public calls;
    mapping(bytes32 => uint256) public outcomes;

    constructor(SynclineMarket m) {
        require(CREDITED == ISynclineMarket.Credited.selector, "Credited topic");
        require(FINALIZED == ISynclineMarket.RoundFinalized.selector, "RoundFinalized topic");
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
        a = address(uint160(uint256(keccak256(abi.encodePacked("syncline-invariant", name)))));
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

    // ------------------------------------------------------------------ plumbing

    modifier step(bytes32 name) {
        vm.warp(currentTime);
        vm.recordLogs();
        _;
        _afterStep();
        calls[name] += 1;
    }

    function _advanceTo(uint256 t) internal {
        if (t > currentTime) {
            currentTime = t;
            vm.warp(t);
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
                (uint256 amount,) = abi.decode(logs[i].data, (uint256, bytes32));
                ghostCredited += amount;
                creditedOf[account] += amount;
            } else if (topic == ISynclineMarket.TaskSealed.selector) {
                outcomes["sealed"] += 1;
            } else if (topic == ISynclineMarket.TaskCancelled.selector) {
                outcomes["cancelled"] += 1;
            } else if (topic == ISynclineMarket.TrainerEvicted.selector) {
                outcomes["evicted"] += 1;
            } else if (topic == ISynclineMarket.RoundCarriedForward.selector) {
                outcomes["carried"] += 1;
            } else if (topic == ISynclineMarket.DissentRecorded.selector) {
                outcomes["dissent"] += 1;
            } else if (topic == ISynclineMarket.Withdrawn.selector) {
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

    function postTask(uint256 sponsorSeed, uint256 pool, uint256 fee, uint256 stake, uint256 shape)
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
        s.trainerStake = uint128(bound(stake, 1, 5 ether));
        s.witnessFee = uint128(bound(fee, 0, 0.1 ether));
        s.outerLrPpm = 700_000;
        s.outerMomentumPpm = 900_000;
        s.gradientBits = 16;
        s.witnesses = _witnesses;
        uint256 budget = uint256(s.witnessFee) * s.threshold * s.rounds;
        pool = bound(pool, 1, 50 ether);

        vm.prank(_sponsors[sponsorSeed % _sponsors.length]);
        uint256 id = market.postTask{value: pool + budget}(s);
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

    /// @dev Every active trainer whose fragment bit is not in `skipMask` commits for the open round.
    function commit(uint256 taskSeed, uint256 skipMask) external step("commit") {
        (bool ok, uint256 id) = _task(taskSeed);
        if (!ok) return;
        TaskState memory t = market.getTaskState(id);
        if (t.status != TaskStatus.Running) return;
        address[] memory ts = market.getTrainers(id);
        skipMask &= 0x5; // at most fragments 0 and 2 skip, so many rounds still get commits
        for (uint256 i = 0; i < ts.length; ++i) {
            if (skipMask & (uint256(1) << i) != 0) continue;
            vm.prank(ts[i]);
            try market.commitSubmission(
                id,
                t.currentRound,
                // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
                uint16(i),
                keccak256(abi.encode("payload", id, t.currentRound, i)),
                keccak256(abi.encode("chunks", id, t.currentRound, i)),
                "ipfs://grad"
            ) {}
                catch {}
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
        // Book what earlier calls of this step logged, so that a replay's own logs can be told apart.
        _afterStep();
        vm.recordLogs();
        vm.prank(w);
        try market.finalizeRound(id, round, root, agg, mask, maskSeed % 1e6) {
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
            if (bytes4(err) == ISynclineMarket.ConflictingFinalize.selector) outcomes["conflictRejected"] += 1;
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
