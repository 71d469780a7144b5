// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./base/Vm.sol";

import {SynclineTest} from "./base/SynclineTest.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {SynclineMarket} from "../src/SynclineMarket.sol";
import {ISynclineTaskPosting} from "../src/ISynclineTaskPosting.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    Tier,
    AggregationRule,
    TrainerRecord,
    WitnessRecord,
    TrainingReceipt
} from "../src/SynclineTypes.sol";

/// @dev A trainer contract whose `receive` reverts until `accept` is switched on.
contract RevertingReceiver {
    SynclineMarket internal immutable market;
    bool public accept;

    constructor(SynclineMarket m) {
        market = m;
    }

    function setAccept(bool a) external {
        accept = a;
    }

    function enroll(uint256 taskId) external payable {
        market.enroll{value: msg.value}(taskId);
    }

    function withdraw() external {
        market.withdraw();
    }

    receive() external payable {
        require(accept, "RevertingReceiver: no thanks");
    }
}

/// @dev A trainer contract that tries to withdraw again from inside `receive`.
contract ReentrantReceiver {
    SynclineMarket internal immutable market;
    bool public reentered;
    bytes public reentryError;
    uint256 public received;

    constructor(SynclineMarket m) {
        market = m;
    }

    function enroll(uint256 taskId) external payable {
        market.enroll{value: msg.value}(taskId);
    }

    function withdraw() external {
        market.withdraw();
    }

    receive() external payable {
        received += msg.value;
        if (reentered) return;
        reentered = true;
        try market.withdraw() {}
        catch (bytes memory err) {
            reentryError = err;
        }
    }
}

/// @notice Task registry, spec validation, escrow, cancellation, pull payments and views.
contract TaskEscrowTest is SynclineTest {
    bytes4 internal constant REENTRANT_CALL = bytes4(keccak256("ReentrancyGuardReentrantCall()"));

    function _expectPostRevert(TaskSpec memory s, uint256 value, bytes memory err) internal {
        vm.prank(sponsor);
        vm.expectRevert(err);
        ISynclineTaskPosting(address(market)).postTask{value: value}(s);
    }

    function _expectSpecRevert(TaskSpec memory s, bytes memory err) internal {
        _expectPostRevert(s, POOL + _feeBudget(s), err);
    }

    function _zeroField(string memory field) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(ISynclineEvents.SynclineZeroSpecField.selector, field);
    }

    function _bounds(TaskSpec memory s) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(
            ISynclineEvents.SynclineTrainerBoundsInvalid.selector, s.minTrainers, s.maxTrainers, s.shardCount
        );
    }

    function _inconsistent(TaskSpec memory s) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(
            ISynclineEvents.SynclineRuleParamInconsistent.selector, s.rule, s.ruleParam, s.minTrainers
        );
    }

    // ================================================================== postTask: success

    function test_postTask_validSpec_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        uint256 budget = uint256(FEE) * THRESHOLD * ROUNDS;
        vm.assertEq(budget, 0.06 ether, "fixture fee budget");

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TaskPosted(1, sponsor, s.specHash, s.specURI, POOL, budget);
        vm.prank(sponsor);
        uint256 id = ISynclineTaskPosting(address(market)).postTask{value: POOL + budget}(s);

        vm.assertEq(id, 1, "ids start at 1");
        vm.assertEq(market.taskCount(), 1, "taskCount");
        vm.assertEq(address(market).balance, POOL + budget, "market balance");
        vm.assertEq(market.escrowOf(id), POOL + budget, "escrowOf");

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.sponsor, sponsor, "sponsor");
        vm.assertEq(uint256(t.status), uint256(TaskStatus.Enrolling), "status");
        vm.assertEq(t.stateRoot, s.initialStateRoot, "state root = initial");
        vm.assertEq(t.rewardPool, POOL, "reward pool");
        vm.assertEq(t.feeBudget, budget, "fee budget");
        vm.assertEq(uint256(t.enrolled), 0, "enrolled");
        vm.assertEq(t.stakeHeld, 0, "stakeHeld");
        vm.assertEq(uint256(t.currentRound), 0, "currentRound");

        TaskSpec memory stored = market.getSpec(id);
        vm.assertEq(stored.specHash, s.specHash, "specHash");
        vm.assertEq(stored.specURI, s.specURI, "specURI");
        vm.assertEq(stored.modelHash, s.modelHash, "modelHash");
        vm.assertEq(stored.datasetRoot, s.datasetRoot, "datasetRoot");
        vm.assertEq(uint256(stored.shardCount), SHARDS, "shardCount");
        vm.assertEq(uint256(stored.rounds), ROUNDS, "rounds");
        vm.assertEq(uint256(stored.enrollmentDeadline), uint256(s.enrollmentDeadline), "deadline");
        vm.assertEq(uint256(stored.trainerStake), STAKE, "stake");
        vm.assertEq(uint256(stored.witnessFee), FEE, "fee");
        vm.assertEq(uint256(stored.outerLrPpm), 700_000, "outerLrPpm");
        vm.assertEq(uint256(stored.gradientBits), 8, "gradientBits");
        vm.assertEq(uint256(stored.paramCount), PARAM_COUNT, "paramCount");
        vm.assertEq(uint256(stored.checkpointInterval), CHECKPOINT_INTERVAL, "checkpointInterval");
        vm.assertEq(uint256(stored.witnessBond), WITNESS_BOND, "witnessBond");
        vm.assertEq(uint256(stored.challengeBond), CHALLENGE_BOND, "challengeBond");
        vm.assertEq(t.bondsHeld, 0, "no bond held");
        vm.assertEq(uint256(t.openChallenges), 0, "no challenge");
        vm.assertEq(stored.witnesses.length, N_WITNESSES, "witness count");
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            vm.assertEq(stored.witnesses[i], witnesses[i], "witness order");
        }
    }

    function test_postTask_idsIncrement_succeeds() public {
        uint256 a = _postDefault();
        uint256 b = _postDefault();
        uint256 c = _post(_defaultSpec(), 1);
        vm.assertEq(a, 1, "first id");
        vm.assertEq(b, 2, "second id");
        vm.assertEq(c, 3, "third id");
        vm.assertEq(market.taskCount(), 3, "taskCount");
        vm.assertEq(market.escrowOf(c), 1 + 0.06 ether, "1-wei pool escrow");
        vm.assertEq(address(market).balance, 2 * (POOL + 0.06 ether) + 1 + 0.06 ether, "balance");
    }

    function test_postTask_zeroWitnessFee_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.witnessFee = 0;
        vm.prank(sponsor);
        uint256 id = ISynclineTaskPosting(address(market)).postTask{value: 5 ether}(s);
        vm.assertEq(market.getTaskState(id).rewardPool, 5 ether, "whole value is the pool");
        vm.assertEq(market.getTaskState(id).feeBudget, 0, "no fee budget");
    }

    function test_postTask_boundaryValues_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.maxTrainers = 64;
        s.shardCount = 256;
        s.evictionSlashBps = 10_000;
        s.gradientBits = 16;
        s.enrollmentDeadline = uint64(block.timestamp + 1);
        // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
        s.threshold = uint8(N_WITNESSES);
        uint256 id = _post(s, 1);
        TaskSpec memory stored = market.getSpec(id);
        vm.assertEq(uint256(stored.maxTrainers), 64, "maxTrainers 64");
        vm.assertEq(uint256(stored.shardCount), 256, "shardCount 256");
        vm.assertEq(uint256(stored.evictionSlashBps), 10_000, "slash 100%");
        vm.assertEq(uint256(stored.gradientBits), 16, "16-bit gradients");
    }

    function test_postTask_maxWitnesses_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.witnesses = new address[](32);
        for (uint256 i = 0; i < 32; ++i) {
            // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
            s.witnesses[i] = address(uint160(0x1000 + i));
        }
        s.threshold = 32;
        uint256 id = _post(s, POOL);
        vm.assertEq(market.getSpec(id).witnesses.length, 32, "32 witnesses stored");
        vm.assertEq(market.getTaskState(id).feeBudget, uint256(FEE) * 32 * ROUNDS, "fee budget uses k");
    }

    function testFuzz_postTask_escrowSplit_succeeds(uint256 pool, uint128 fee, uint8 k, uint32 rounds) public {
        k = uint8(bound(k, 1, N_WITNESSES));
        rounds = uint32(bound(rounds, 1, 10_000));
        fee = uint128(bound(fee, 0, 1_000 ether));
        pool = bound(pool, 1, 1_000_000 ether);
        TaskSpec memory s = _defaultSpec();
        s.threshold = k;
        s.rounds = rounds;
        s.witnessFee = fee;
        pool = _deterredPool(s, pool);
        uint256 budget = uint256(fee) * k * rounds;
        vm.deal(sponsor, pool + budget);

        vm.prank(sponsor);
        uint256 id = ISynclineTaskPosting(address(market)).postTask{value: pool + budget}(s);

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.feeBudget, budget, "fee budget = fee * k * rounds");
        vm.assertEq(t.rewardPool, pool, "pool = value - budget");
        vm.assertEq(market.escrowOf(id), pool + budget, "escrow = value");
        vm.assertEq(address(market).balance, pool + budget, "balance");
        vm.assertEq(sponsor.balance, 0, "sponsor paid everything");
    }

    // ================================================================== postTask: escrow

    function test_postTask_escrowEqualsFeeBudget_reverts() public {
        TaskSpec memory s = _defaultSpec();
        uint256 budget = _feeBudget(s);
        _expectPostRevert(
            s, budget, abi.encodeWithSelector(ISynclineEvents.SynclineInsufficientEscrow.selector, budget, budget)
        );
    }

    function test_postTask_escrowBelowFeeBudget_reverts() public {
        TaskSpec memory s = _defaultSpec();
        uint256 budget = _feeBudget(s);
        _expectPostRevert(
            s,
            budget - 1,
            abi.encodeWithSelector(ISynclineEvents.SynclineInsufficientEscrow.selector, budget - 1, budget)
        );
    }

    function test_postTask_zeroValueZeroFee_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnessFee = 0;
        _expectPostRevert(s, 0, abi.encodeWithSelector(ISynclineEvents.SynclineInsufficientEscrow.selector, 0, 0));
    }

    function testFuzz_postTask_insufficientEscrow_reverts(uint256 value, uint128 fee) public {
        fee = uint128(bound(fee, 0, 1_000 ether));
        TaskSpec memory s = _defaultSpec();
        s.witnessFee = fee;
        uint256 budget = _feeBudget(s);
        value = bound(value, 0, budget);
        _expectPostRevert(
            s, value, abi.encodeWithSelector(ISynclineEvents.SynclineInsufficientEscrow.selector, value, budget)
        );
    }

    // ================================================================== postTask: witnesses

    function test_postTask_zeroThreshold_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.threshold = 0;
        _expectSpecRevert(
            s, abi.encodeWithSelector(ISynclineEvents.SynclineInvalidThreshold.selector, uint8(0), N_WITNESSES)
        );
    }

    function test_postTask_thresholdAboveWitnessCount_reverts() public {
        TaskSpec memory s = _defaultSpec();
        // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
        s.threshold = uint8(N_WITNESSES + 1);
        _expectSpecRevert(
            s, abi.encodeWithSelector(ISynclineEvents.SynclineInvalidThreshold.selector, s.threshold, N_WITNESSES)
        );
    }

    function test_postTask_noWitnesses_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnesses = new address[](0);
        s.threshold = 1;
        _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineInvalidThreshold.selector, uint8(1), 0));
    }

    function test_postTask_tooManyWitnesses_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnesses = new address[](33);
        for (uint256 i = 0; i < 33; ++i) {
            // forge-lint: disable-next-line(unsafe-typecast) -- small test values, cannot truncate
            s.witnesses[i] = address(uint160(0x1000 + i));
        }
        s.threshold = 1;
        _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineInvalidThreshold.selector, uint8(1), 33));
    }

    function test_postTask_zeroWitness_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnesses[2] = address(0);
        _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineZeroWitness.selector, 2));
    }

    function test_postTask_duplicateWitness_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnesses[2] = s.witnesses[0];
        _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineDuplicateWitness.selector, witnesses[0]));
    }

    /// Finding 4: the sponsor may not sit on its own committee (it could finalize anything).
    function test_postTask_sponsorAsWitness_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnesses[1] = sponsor;
        _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineSponsorIsWitness.selector, sponsor, 1));
    }

    // ================================================================== postTask: zero fields

    /// Finding 4: every vote puts a bond at stake; a spec without one is refused.
    function test_postTask_zeroWitnessBond_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.witnessBond = 0;
        _expectSpecRevert(s, _zeroField("witnessBond"));
    }

    function test_postTask_zeroRounds_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.rounds = 0;
        _expectPostRevert(s, POOL, _zeroField("rounds"));
    }

    function test_postTask_zeroInnerSteps_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.innerSteps = 0;
        _expectSpecRevert(s, _zeroField("innerSteps"));
    }

    function test_postTask_zeroRoundDuration_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.roundDuration = 0;
        _expectSpecRevert(s, _zeroField("roundDuration"));
    }

    function test_postTask_zeroTrainerStake_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.trainerStake = 0;
        _expectSpecRevert(s, _zeroField("trainerStake"));
    }

    function test_postTask_zeroSpecHash_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.specHash = bytes32(0);
        _expectSpecRevert(s, _zeroField("specHash"));
    }

    function test_postTask_zeroInitialStateRoot_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.initialStateRoot = bytes32(0);
        _expectSpecRevert(s, _zeroField("initialStateRoot"));
    }

    function test_postTask_zeroOuterLr_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.outerLrPpm = 0;
        _expectSpecRevert(s, _zeroField("outerLrPpm"));
    }

    // ================================================================== postTask: trainer bounds

    function test_postTask_zeroMinTrainers_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.minTrainers = 0;
        _expectSpecRevert(s, _bounds(s));
    }

    function test_postTask_maxBelowMin_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.minTrainers = 3;
        s.maxTrainers = 2;
        _expectSpecRevert(s, _bounds(s));
    }

    function test_postTask_maxAbove64_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.maxTrainers = 65;
        s.shardCount = 65;
        _expectSpecRevert(s, _bounds(s));
    }

    function test_postTask_shardsBelowMax_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.shardCount = MAX_TRAINERS - 1;
        _expectSpecRevert(s, _bounds(s));
    }

    function test_postTask_shardsAbove256_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.shardCount = 257;
        _expectSpecRevert(s, _bounds(s));
    }

    function testFuzz_postTask_trainerBounds(uint16 minT, uint16 maxT, uint16 shards) public {
        minT = uint16(bound(minT, 0, 80));
        maxT = uint16(bound(maxT, 0, 80));
        shards = uint16(bound(shards, 0, 300));
        TaskSpec memory s = _defaultSpec();
        s.minTrainers = minT;
        s.maxTrainers = maxT;
        s.shardCount = shards;
        bool valid = minT >= 1 && maxT >= minT && maxT <= 64 && shards >= maxT && shards <= 256;
        if (valid) {
            uint256 id = _post(s, POOL);
            vm.assertEq(uint256(market.getSpec(id).maxTrainers), maxT, "stored maxTrainers");
        } else {
            _expectSpecRevert(s, _bounds(s));
        }
    }

    // ================================================================== postTask: other fields

    function test_postTask_deadlineNow_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.enrollmentDeadline = uint64(block.timestamp);
        _expectSpecRevert(
            s,
            abi.encodeWithSelector(
                ISynclineEvents.SynclineDeadlineInPast.selector, s.enrollmentDeadline, block.timestamp
            )
        );
    }

    function test_postTask_deadlineInPast_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.enrollmentDeadline = uint64(block.timestamp - 1 hours);
        _expectSpecRevert(
            s,
            abi.encodeWithSelector(
                ISynclineEvents.SynclineDeadlineInPast.selector, s.enrollmentDeadline, block.timestamp
            )
        );
    }

    function test_postTask_slashBpsAbove10000_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.evictionSlashBps = 10_001;
        _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineSlashBpsTooHigh.selector, uint16(10_001)));
    }

    function testFuzz_postTask_slashBps(uint16 bps) public {
        TaskSpec memory s = _defaultSpec();
        s.evictionSlashBps = bps;
        if (bps <= 10_000) {
            uint256 id = _post(s, POOL);
            vm.assertEq(uint256(market.getSpec(id).evictionSlashBps), bps, "stored bps");
        } else {
            _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineSlashBpsTooHigh.selector, bps));
        }
    }

    function test_postTask_gradientBitsNot8Or16_reverts() public {
        uint8[4] memory bad = [uint8(0), 4, 12, 32];
        for (uint256 i = 0; i < bad.length; ++i) {
            TaskSpec memory s = _defaultSpec();
            s.gradientBits = bad[i];
            _expectSpecRevert(
                s, abi.encodeWithSelector(ISynclineEvents.SynclineUnsupportedGradientBits.selector, bad[i])
            );
        }
    }

    function testFuzz_postTask_gradientBits(uint8 bits) public {
        TaskSpec memory s = _defaultSpec();
        s.gradientBits = bits;
        if (bits == 8 || bits == 16) {
            uint256 id = _post(s, POOL);
            vm.assertEq(uint256(market.getSpec(id).gradientBits), bits, "stored bits");
        } else {
            _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineUnsupportedGradientBits.selector, bits));
        }
    }

    // ================================================================== postTask: fraud-proof fields

    function _invalidField(string memory field) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(ISynclineEvents.SynclineSpecFieldInvalid.selector, field);
    }

    function test_postTask_zeroParamCount_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.paramCount = 0;
        _expectSpecRevert(s, _invalidField("paramCount"));
    }

    function test_postTask_paramCountBounds_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.paramCount = 1;
        vm.assertEq(uint256(market.getSpec(_post(s, POOL)).paramCount), 1, "one parameter");
        s.paramCount = type(uint64).max;
        vm.assertEq(uint256(market.getSpec(_post(s, POOL)).paramCount), type(uint64).max, "uint64 max");
    }

    function test_postTask_zeroCheckpointInterval_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.checkpointInterval = 0;
        _expectSpecRevert(s, _invalidField("checkpointInterval"));
    }

    function test_postTask_checkpointIntervalAboveInnerSteps_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.checkpointInterval = INNER_STEPS + 1;
        _expectSpecRevert(s, _invalidField("checkpointInterval"));
    }

    function test_postTask_checkpointIntervalBounds_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.checkpointInterval = 1; // a checkpoint after every inner step
        vm.assertEq(uint256(market.getSpec(_post(s, POOL)).checkpointInterval), 1, "every step");
        s.checkpointInterval = INNER_STEPS; // one segment: only the final state
        vm.assertEq(uint256(market.getSpec(_post(s, POOL)).checkpointInterval), INNER_STEPS, "one segment");
    }

    function testFuzz_postTask_checkpointInterval(uint32 innerSteps, uint32 interval, uint64 paramCount) public {
        innerSteps = uint32(bound(innerSteps, 1, type(uint32).max));
        TaskSpec memory s = _defaultSpec();
        s.innerSteps = innerSteps;
        s.checkpointInterval = interval;
        s.paramCount = paramCount;
        if (paramCount == 0) {
            _expectSpecRevert(s, _invalidField("paramCount"));
        } else if (interval == 0 || interval > innerSteps) {
            _expectSpecRevert(s, _invalidField("checkpointInterval"));
        } else {
            uint256 id = _post(s, POOL);
            vm.assertEq(uint256(market.getSpec(id).checkpointInterval), interval, "stored interval");
            vm.assertEq(uint256(market.getSpec(id).paramCount), paramCount, "stored paramCount");
        }
    }

    /// The bonds are free parameters: any positive witness bond and any challenge bond (zero
    /// included) is accepted.
    function testFuzz_postTask_bonds_succeeds(uint128 witnessBond, uint128 challengeBond) public {
        witnessBond = uint128(bound(witnessBond, 1, type(uint128).max));
        TaskSpec memory s = _defaultSpec();
        s.witnessBond = witnessBond;
        s.challengeBond = challengeBond;
        uint256 id = _post(s, POOL);
        vm.assertEq(uint256(market.getSpec(id).witnessBond), witnessBond, "witnessBond");
        vm.assertEq(uint256(market.getSpec(id).challengeBond), challengeBond, "challengeBond");
        vm.assertEq(market.escrowOf(id), POOL + _feeBudget(s), "bonds are not escrowed by the sponsor");
    }

    // ================================================================== postTask: tier policy

    function test_postTask_openTierRobustRule_reverts() public {
        for (uint8 rule = 1; rule <= uint8(AggregationRule.CenteredClip); ++rule) {
            TaskSpec memory s = _validRuleSpec(Tier.Open, AggregationRule(rule));
            _expectSpecRevert(
                s,
                abi.encodeWithSelector(
                    ISynclineEvents.SynclineRuleNotAdmitted.selector, Tier.Open, AggregationRule(rule)
                )
            );
        }
    }

    function test_postTask_verifiedAndConfidentialAdmitEveryRule_succeeds() public {
        for (uint8 tier = 1; tier <= 2; ++tier) {
            for (uint8 rule = 0; rule <= uint8(AggregationRule.CenteredClip); ++rule) {
                TaskSpec memory s = _validRuleSpec(Tier(tier), AggregationRule(rule));
                uint256 id = _post(s, POOL);
                vm.assertEq(uint256(market.getSpec(id).rule), rule, "stored rule");
                vm.assertEq(uint256(market.getSpec(id).tier), tier, "stored tier");
            }
        }
        vm.assertEq(market.taskCount(), 12, "2 tiers x 6 rules posted");
    }

    function testFuzz_postTask_tierAdmission(uint8 tier, uint8 rule) public {
        tier = uint8(bound(tier, 0, 2));
        rule = uint8(bound(rule, 0, 5));
        TaskSpec memory s = _validRuleSpec(Tier(tier), AggregationRule(rule));
        if (tier == uint8(Tier.Open) && rule != uint8(AggregationRule.Mean)) {
            _expectSpecRevert(s, abi.encodeWithSelector(ISynclineEvents.SynclineRuleNotAdmitted.selector, tier, rule));
        } else {
            uint256 id = _post(s, POOL);
            vm.assertEq(uint256(market.getSpec(id).rule), rule, "admitted");
        }
    }

    /// @dev A spec whose rule parameter is consistent with minTrainers = 5.
    function _validRuleSpec(Tier tier, AggregationRule rule) internal view returns (TaskSpec memory s) {
        s = _defaultSpec();
        s.tier = tier;
        s.rule = rule;
        s.minTrainers = 5;
        s.maxTrainers = 6;
        if (rule == AggregationRule.TrimmedMean) s.ruleParam = 2000; // trims 1 of 5 on each side
        else if (rule == AggregationRule.Krum || rule == AggregationRule.MultiKrum) s.ruleParam = 1; // 5 >= 2*1+3
        else if (rule == AggregationRule.CenteredClip) s.ruleParam = 1_000_000;
        else s.ruleParam = 0;
    }

    function test_postTask_trimmedMeanZeroBeta_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Verified, AggregationRule.TrimmedMean);
        s.ruleParam = 0;
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_trimmedMeanHalfBeta_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Verified, AggregationRule.TrimmedMean);
        s.ruleParam = 5000;
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_trimmedMeanTrimsNothingAtMin_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Verified, AggregationRule.TrimmedMean);
        s.ruleParam = 1999; // floor(1999 * 5 / 1e4) = 0
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_krumTooFewTrainers_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Verified, AggregationRule.Krum);
        s.ruleParam = 2; // needs 7 >= 2*2+3, has 5
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_multiKrumTooFewTrainers_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Confidential, AggregationRule.MultiKrum);
        s.ruleParam = 2;
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_centeredClipZeroRadius_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Verified, AggregationRule.CenteredClip);
        s.ruleParam = 0;
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_meanWithParam_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Open, AggregationRule.Mean);
        s.ruleParam = 1;
        _expectSpecRevert(s, _inconsistent(s));
    }

    function test_postTask_coordinateMedianWithParam_reverts() public {
        TaskSpec memory s = _validRuleSpec(Tier.Verified, AggregationRule.CoordinateMedian);
        s.ruleParam = 7;
        _expectSpecRevert(s, _inconsistent(s));
    }

    // ================================================================== cancelUnderfilled

    function test_cancelUnderfilled_atDeadline_reverts() public {
        uint256 id = _postDefault();
        uint64 deadline = market.getSpec(id).enrollmentDeadline;
        warpTo(deadline);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnrollmentStillOpen.selector, id, deadline));
        market.cancelUnderfilled(id);
    }

    function test_cancelUnderfilled_enoughTrainers_reverts() public {
        uint256 id = _postDefault();
        _enrollMany(id, MIN_TRAINERS);
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineNotUnderfilled.selector, id, MIN_TRAINERS, MIN_TRAINERS)
        );
        market.cancelUnderfilled(id);
    }

    function test_cancelUnderfilled_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 7));
        market.cancelUnderfilled(7);
    }

    function test_cancelUnderfilled_running_reverts() public {
        uint256 id = _postAndStart();
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Running, TaskStatus.Enrolling
            )
        );
        market.cancelUnderfilled(id);
    }

    function test_cancelUnderfilled_refundsEveryone_succeeds() public {
        uint256 id = _postDefault();
        uint256 budget = _feeBudget(_defaultSpec());
        _enroll(id, trainers[0]);
        vm.assertEq(market.escrowOf(id), POOL + budget + STAKE, "escrow before");
        warpTo(market.getSpec(id).enrollmentDeadline + 1);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, trainers[0], STAKE, "stake-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, sponsor, POOL + budget, "sponsor-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TaskCancelled(id, 1, POOL + budget);
        vm.prank(stranger); // anyone may call
        market.cancelUnderfilled(id);

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.status), uint256(TaskStatus.Cancelled), "status");
        vm.assertEq(t.sponsorRefund, POOL + budget, "sponsorRefund");
        vm.assertEq(t.rewardPool + t.feeBudget + t.stakeHeld, 0, "nothing left in the task");
        vm.assertEq(market.escrowOf(id), 0, "escrowOf");
        vm.assertEq(market.creditOf(sponsor), POOL + budget, "sponsor credit");
        vm.assertEq(market.creditOf(trainers[0]), STAKE, "trainer credit");
        vm.assertEq(uint256(market.getTrainer(id, trainers[0]).stake), 0, "stake cleared");
        _assertMoneyInvariant(_one(id), _allActors());

        uint256 sponsorBefore = sponsor.balance;
        uint256 trainerBefore = trainers[0].balance;
        vm.prank(sponsor);
        market.withdraw();
        vm.prank(trainers[0]);
        market.withdraw();
        vm.assertEq(sponsor.balance, sponsorBefore + POOL + budget, "sponsor refunded to the wei");
        vm.assertEq(trainers[0].balance, trainerBefore + STAKE, "trainer refunded to the wei");
        vm.assertEq(address(market).balance, 0, "market empty");

        TrainingReceipt memory rc = _receipt(id);
        vm.assertEq(uint256(rc.status), uint256(TaskStatus.Cancelled), "receipt status");
        vm.assertEq(rc.sponsorRefund, POOL + budget, "receipt sponsorRefund");
        vm.assertEq(rc.trainers.length, 1, "receipt trainers");
        vm.assertEq(rc.trainers[0].stakeRefund, STAKE, "receipt stake refund");
        vm.assertEq(rc.trainers[0].reward, 0, "no reward");
    }

    function test_cancelUnderfilled_noTrainers_succeeds() public {
        uint256 id = _postDefault();
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
        vm.assertEq(market.creditOf(sponsor), POOL + _feeBudget(_defaultSpec()), "sponsor credit");
        vm.assertEq(market.escrowOf(id), 0, "escrow");
    }

    function test_cancelUnderfilled_twice_reverts() public {
        uint256 id = _postDefault();
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Cancelled, TaskStatus.Enrolling
            )
        );
        market.cancelUnderfilled(id);
        vm.assertEq(market.creditOf(sponsor), POOL + _feeBudget(_defaultSpec()), "refunded once");
    }

    function test_cancelUnderfilled_thenEnrollAndStart_reverts() public {
        uint256 id = _postDefault();
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
        bytes memory err = abi.encodeWithSelector(
            ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Cancelled, TaskStatus.Enrolling
        );
        vm.prank(trainers[0]);
        vm.expectRevert(err);
        market.enroll{value: STAKE}(id);
        vm.expectRevert(err);
        market.startRun(id);
    }

    // ================================================================== bondWitness

    function test_bondWitness_enrolling_succeeds() public {
        uint256 id = _post(_bondedSpec(), POOL);
        uint256 escrowBefore = market.escrowOf(id);
        uint256 balanceBefore = address(market).balance;

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.WitnessBonded(id, witnesses[1], WITNESS_BOND);
        vm.prank(witnesses[1]);
        market.bondWitness{value: WITNESS_BOND}(id);

        WitnessRecord memory w = market.getWitness(id, witnesses[1]);
        vm.assertTrue(w.bonded, "bonded");
        vm.assertEq(uint256(w.bond), WITNESS_BOND, "bond");
        vm.assertEq(uint256(w.slashed), 0, "nothing slashed");
        vm.assertFalse(market.getWitness(id, witnesses[0]).bonded, "others unbonded");
        vm.assertEq(market.getTaskState(id).bondsHeld, WITNESS_BOND, "bondsHeld");
        vm.assertEq(market.escrowOf(id), escrowBefore + WITNESS_BOND, "escrowOf includes the bond");
        vm.assertEq(address(market).balance, balanceBefore + WITNESS_BOND, "balance");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function test_bondWitness_running_succeeds() public {
        uint256 id = _post(_bondedSpec(), POOL);
        _enrollMany(id, MAX_TRAINERS);
        _assertStatus(id, TaskStatus.Running, "running");
        _bondAll(id);
        vm.assertEq(market.getTaskState(id).bondsHeld, 3 * uint256(WITNESS_BOND), "three bonds");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function testFuzz_bondWitness_wrongAmount_reverts(uint128 bond, uint256 sent) public {
        bond = uint128(bound(bond, 1, type(uint128).max)); // a spec's witness bond is never 0
        TaskSpec memory s = _defaultSpec();
        s.witnessBond = bond;
        uint256 id = _post(s, POOL);
        sent = bound(sent, 0, ACTOR_FUNDS);
        if (sent == bond) {
            vm.prank(witnesses[0]);
            market.bondWitness{value: sent}(id);
            vm.assertTrue(market.getWitness(id, witnesses[0]).bonded, "the exact amount bonds");
            vm.assertEq(market.getTaskState(id).bondsHeld, bond, "held");
        } else {
            vm.prank(witnesses[0]);
            vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, sent, uint256(bond)));
            market.bondWitness{value: sent}(id);
            vm.assertFalse(market.getWitness(id, witnesses[0]).bonded, "not bonded");
            vm.assertEq(market.getTaskState(id).bondsHeld, 0, "nothing held");
        }
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function test_bondWitness_nothingSent_reverts() public {
        uint256 id = _postDefault();
        vm.prank(witnesses[2]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWrongBond.selector, 0, WITNESS_BOND));
        market.bondWitness(id);
        vm.assertFalse(market.getWitness(id, witnesses[2]).bonded, "a witness never bonds with nothing");
    }

    function test_bondWitness_twice_reverts() public {
        uint256 id = _post(_bondedSpec(), POOL);
        _bond(id, witnesses[0]);
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessAlreadyBonded.selector, id, witnesses[0]));
        market.bondWitness{value: WITNESS_BOND}(id);
        vm.assertEq(market.getTaskState(id).bondsHeld, WITNESS_BOND, "held once");
        vm.assertEq(uint256(market.getWitness(id, witnesses[0]).bond), WITNESS_BOND, "bond unchanged");
    }

    function test_bondWitness_notWitness_reverts() public {
        uint256 id = _post(_bondedSpec(), POOL);
        _enroll(id, trainers[0]);
        address[2] memory outsiders = [stranger, trainers[0]];
        for (uint256 i = 0; i < outsiders.length; ++i) {
            vm.prank(outsiders[i]);
            vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, outsiders[i]));
            market.bondWitness{value: WITNESS_BOND}(id);
        }
        vm.assertEq(market.getTaskState(id).bondsHeld, 0, "nothing held");
    }

    function test_bondWitness_unknownTask_reverts() public {
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 3));
        market.bondWitness{value: WITNESS_BOND}(3);
    }

    function _expectBondStatusRevert(uint256 id, TaskStatus status) internal {
        vm.prank(witnesses[2]);
        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWrongTaskStatus.selector, id, status, TaskStatus.Running)
        );
        market.bondWitness{value: WITNESS_BOND}(id);
    }

    function test_bondWitness_wrongStatus_reverts() public {
        // Awaiting seal, then sealed.
        uint256 id = _post(_bondedSpec(), POOL);
        _enrollMany(id, MAX_TRAINERS);
        _bond(id, witnesses[0]);
        _bond(id, witnesses[1]);
        _runAllRounds(id);
        _expectBondStatusRevert(id, TaskStatus.AwaitingSeal);
        _warpAndSeal(id);
        _expectBondStatusRevert(id, TaskStatus.Sealed);
        // Cancelled.
        uint256 cancelled = _post(_bondedSpec(), POOL);
        warpTo(market.getSpec(cancelled).enrollmentDeadline + 1);
        market.cancelUnderfilled(cancelled);
        _expectBondStatusRevert(cancelled, TaskStatus.Cancelled);
        vm.assertFalse(market.getWitness(id, witnesses[2]).bonded, "never bonded");
        _assertMoneyInvariant(_two(id, cancelled), _allActors());
    }

    function test_cancelUnderfilled_refundsWitnessBonds_succeeds() public {
        uint256 id = _post(_bondedSpec(), POOL);
        uint256 budget = _feeBudget(_bondedSpec());
        _bond(id, witnesses[0]);
        _bond(id, witnesses[2]);
        _enroll(id, trainers[0]);
        vm.assertEq(market.escrowOf(id), POOL + budget + STAKE + 2 * uint256(WITNESS_BOND), "escrow before");
        warpTo(market.getSpec(id).enrollmentDeadline + 1);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, trainers[0], STAKE, "stake-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[0], WITNESS_BOND, "bond-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[2], WITNESS_BOND, "bond-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, sponsor, POOL + budget, "sponsor-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TaskCancelled(id, 1, POOL + budget);
        market.cancelUnderfilled(id);

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.bondsHeld, 0, "bonds released");
        vm.assertEq(market.escrowOf(id), 0, "escrow empty");
        vm.assertEq(uint256(market.getWitness(id, witnesses[0]).bond), 0, "bond cleared");
        vm.assertTrue(market.getWitness(id, witnesses[0]).bonded, "still marked bonded");
        vm.assertEq(market.creditOf(witnesses[0]), WITNESS_BOND, "w0 credit");
        vm.assertEq(market.creditOf(witnesses[1]), 0, "w1 never bonded");
        vm.assertEq(market.creditOf(witnesses[2]), WITNESS_BOND, "w2 credit");
        _assertMoneyInvariant(_one(id), _allActors());

        uint256 before = witnesses[2].balance;
        vm.prank(witnesses[2]);
        market.withdraw();
        vm.assertEq(witnesses[2].balance, before + WITNESS_BOND, "bond back to the wei");
    }

    // ================================================================== withdraw

    function test_withdraw_nothing_reverts() public {
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNothingToWithdraw.selector, stranger));
        market.withdraw();
    }

    function _cancelledWith(address trainerAccount) internal returns (uint256 id) {
        id = _postDefault();
        if (trainerAccount != address(0)) _enroll(id, trainerAccount);
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
    }

    function test_withdraw_success_succeeds() public {
        _cancelledWith(trainers[0]);
        uint256 before = trainers[0].balance;
        uint256 marketBefore = address(market).balance;

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Withdrawn(trainers[0], STAKE);
        vm.prank(trainers[0]);
        market.withdraw();

        vm.assertEq(trainers[0].balance, before + STAKE, "trainer got its stake");
        vm.assertEq(address(market).balance, marketBefore - STAKE, "market paid");
        vm.assertEq(market.creditOf(trainers[0]), 0, "credit cleared");
    }

    function test_withdraw_twice_reverts() public {
        _cancelledWith(trainers[0]);
        vm.prank(trainers[0]);
        market.withdraw();
        uint256 before = trainers[0].balance;
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNothingToWithdraw.selector, trainers[0]));
        market.withdraw();
        vm.assertEq(trainers[0].balance, before, "no second payment");
    }

    function test_withdraw_revertingRecipient_reverts() public {
        RevertingReceiver recv = new RevertingReceiver(market);
        uint256 id = _postDefault();
        recv.enroll{value: STAKE}(id);
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
        vm.assertEq(market.creditOf(address(recv)), STAKE, "credited");
        uint256 marketBefore = address(market).balance;

        vm.expectRevert(
            abi.encodeWithSelector(ISynclineEvents.SynclineWithdrawFailed.selector, address(recv), uint256(STAKE))
        );
        recv.withdraw();

        vm.assertEq(market.creditOf(address(recv)), STAKE, "credit preserved");
        vm.assertEq(address(market).balance, marketBefore, "nothing left the market");
        vm.assertEq(address(recv).balance, 0, "receiver got nothing");

        recv.setAccept(true);
        recv.withdraw();
        vm.assertEq(address(recv).balance, STAKE, "later withdrawal pays the preserved credit");
        vm.assertEq(market.creditOf(address(recv)), 0, "credit cleared");
    }

    function test_withdraw_reentrantRecipient_paysOnce_succeeds() public {
        ReentrantReceiver recv = new ReentrantReceiver(market);
        uint256 id = _postDefault();
        recv.enroll{value: STAKE}(id);
        warpTo(market.getSpec(id).enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
        uint256 marketBefore = address(market).balance;

        recv.withdraw();

        vm.assertTrue(recv.reentered(), "receiver tried to re-enter");
        vm.assertEq(
            keccak256(recv.reentryError()),
            keccak256(abi.encodeWithSelector(REENTRANT_CALL)),
            "re-entry blocked by the guard"
        );
        vm.assertEq(recv.received(), STAKE, "paid exactly once");
        vm.assertEq(address(market).balance, marketBefore - STAKE, "market paid once");
    }

    function testFuzz_withdraw_cancelledStakes(uint128 stake, uint256 pool) public {
        stake = uint128(bound(stake, 2, 10_000 ether));
        pool = bound(pool, 1, 100_000 ether);
        TaskSpec memory s = _defaultSpec();
        s.trainerStake = stake;
        pool = _deterredPool(s, pool);
        uint256 id = _post(s, pool);
        _enroll(id, trainers[0]);
        warpTo(s.enrollmentDeadline + 1);
        market.cancelUnderfilled(id);
        _assertMoneyInvariant(_one(id), _allActors());

        uint256 tBefore = trainers[0].balance;
        uint256 sBefore = sponsor.balance;
        vm.prank(trainers[0]);
        market.withdraw();
        vm.prank(sponsor);
        market.withdraw();
        vm.assertEq(trainers[0].balance - tBefore, stake, "stake back to the wei");
        vm.assertEq(sponsor.balance - sBefore, pool + _feeBudget(s), "escrow back to the wei");
        vm.assertEq(address(market).balance, 0, "market empty");
    }

    // ================================================================== time windows (regression)
    // Found by this suite: _validateSpec used to accept any roundDuration, graceWindow and
    // challengeWindow, while every deadline is computed in checked uint64 arithmetic, so an accepted
    // spec could make a run impossible to start, close or carry forward (Panic 0x11) and lock the
    // escrow and all stakes. Fixed by MAX_WINDOW (365 days) and SynclineWindowTooLong.

    function _windowTooLong(string memory field, uint256 value) internal view returns (bytes memory) {
        return abi.encodeWithSelector(
            ISynclineEvents.SynclineWindowTooLong.selector, field, value, uint256(market.MAX_WINDOW())
        );
    }

    function test_postTask_roundDurationTooLong_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.roundDuration = 365 days + 1;
        _expectSpecRevert(s, _windowTooLong("roundDuration", 365 days + 1));
        s.roundDuration = type(uint64).max; // used to lock the funds: _startRun overflowed
        _expectSpecRevert(s, _windowTooLong("roundDuration", type(uint64).max));
    }

    function test_postTask_graceWindowTooLong_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.graceWindow = 365 days + 1;
        _expectSpecRevert(s, _windowTooLong("graceWindow", 365 days + 1));
        s.graceWindow = type(uint64).max; // used to make carryForward overflow forever
        _expectSpecRevert(s, _windowTooLong("graceWindow", type(uint64).max));
    }

    function test_postTask_challengeWindowTooLong_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.challengeWindow = 365 days + 1;
        _expectSpecRevert(s, _windowTooLong("challengeWindow", 365 days + 1));
        s.challengeWindow = type(uint64).max; // used to make the last round's quorum vote overflow
        _expectSpecRevert(s, _windowTooLong("challengeWindow", type(uint64).max));
    }

    function test_postTask_enrollmentTooFar_reverts() public {
        TaskSpec memory s = _defaultSpec();
        s.enrollmentDeadline = uint64(block.timestamp + 365 days + 1);
        _expectSpecRevert(s, _windowTooLong("enrollmentDeadline", 365 days + 1));
    }

    function testFuzz_postTask_windows(uint64 roundDuration, uint64 grace, uint64 challenge, uint64 enrollment) public {
        uint64 max = market.MAX_WINDOW();
        vm.assertEq(uint256(max), 365 days, "MAX_WINDOW");
        TaskSpec memory s = _defaultSpec();
        s.roundDuration = uint64(bound(roundDuration, 1, 2 * uint256(max)));
        s.graceWindow = uint64(bound(grace, 0, 2 * uint256(max)));
        s.challengeWindow = uint64(bound(challenge, 0, 2 * uint256(max)));
        s.enrollmentDeadline = uint64(block.timestamp + bound(enrollment, 1, 2 * uint256(max)));
        uint256 distance = s.enrollmentDeadline - block.timestamp;
        if (distance > max) {
            _expectSpecRevert(s, _windowTooLong("enrollmentDeadline", distance));
        } else if (s.roundDuration > max) {
            _expectSpecRevert(s, _windowTooLong("roundDuration", s.roundDuration));
        } else if (s.graceWindow > max) {
            _expectSpecRevert(s, _windowTooLong("graceWindow", s.graceWindow));
        } else if (s.challengeWindow > max) {
            _expectSpecRevert(s, _windowTooLong("challengeWindow", s.challengeWindow));
        } else if (s.challengeWindow < MIN_CHALLENGE_WINDOW) {
            _expectSpecRevert(s, _windowTooShort(s.challengeWindow));
        } else {
            uint256 id = _post(s, POOL);
            vm.assertEq(uint256(market.getSpec(id).challengeWindow), s.challengeWindow, "stored");
        }
    }

    /// @dev Issue 27 item 5: a window an honest party cannot meet is refused. With 0, 1 or 5 s (all
    /// accepted before), a paused trainer lost its stake to a claim it had no time to answer.
    function test_postTask_challengeWindowBelowMinimum_reverts() public {
        uint64[4] memory tooShort = [uint64(0), 1, 5, MIN_CHALLENGE_WINDOW - 1];
        for (uint256 i = 0; i < tooShort.length; ++i) {
            TaskSpec memory s = _defaultSpec();
            s.challengeWindow = tooShort[i];
            _expectSpecRevert(s, _windowTooShort(tooShort[i]));
        }
        TaskSpec memory ok = _defaultSpec();
        ok.challengeWindow = MIN_CHALLENGE_WINDOW;
        uint256 id = _post(ok, POOL);
        vm.assertEq(uint256(market.getSpec(id).challengeWindow), MIN_CHALLENGE_WINDOW, "the minimum is accepted");
    }

    function _windowTooShort(uint256 value) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(
            ISynclineEvents.SynclineWindowTooShort.selector, "challengeWindow", value, MIN_CHALLENGE_WINDOW
        );
    }

    /// @dev The longest windows the market accepts still run to completion: no deadline overflows.
    function test_postTask_maxWindows_runToSeal_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.rounds = 2;
        s.roundDuration = 365 days;
        s.graceWindow = 365 days;
        s.challengeWindow = 365 days;
        s.enrollmentDeadline = uint64(block.timestamp + 365 days);
        uint256 id = _post(s, POOL);
        _bondAll(id);
        _enrollMany(id, MIN_TRAINERS);
        warpTo(s.enrollmentDeadline + 1);
        market.startRun(id);
        _runRound(id, 0);
        _commitAll(id, 1);
        _warpPastGrace(id);
        market.carryForward(id, 1);
        _warpAndSeal(id);
        _assertStatus(id, TaskStatus.Sealed, "sealed");
        vm.assertEq(market.creditOf(trainers[0]), POOL / 2 + STAKE, "half the pool (5 of 10 shards) + stake");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    // ================================================================== views

    function test_views_unknownTask_reverts() public {
        _postDefault();
        uint256[2] memory ids = [uint256(0), 2];
        for (uint256 i = 0; i < ids.length; ++i) {
            bytes memory err = abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, ids[i]);
            vm.expectRevert(err);
            market.getSpec(ids[i]);
            vm.expectRevert(err);
            market.getTaskState(ids[i]);
            vm.expectRevert(err);
            market.getWitness(ids[i], witnesses[0]);
            vm.expectRevert(err);
            market.escrowOf(ids[i]);
            vm.expectRevert(err);
            market.getTrainers(ids[i]);
            vm.expectRevert(err);
            market.getTrainer(ids[i], trainers[0]);
            vm.expectRevert(err);
            market.getRound(ids[i], 0);
            vm.expectRevert(err);
            court.getSubmission(ids[i], 0, 0);
            vm.expectRevert(err);
            court.voteOf(ids[i], 0, witnesses[0]);
            vm.expectRevert(err);
            _receipt(ids[i]);
        }
    }

    function test_views_freshMarket_succeeds() public view {
        vm.assertEq(market.taskCount(), 0, "no tasks");
        vm.assertEq(market.creditOf(sponsor), 0, "no credit");
        vm.assertEq(uint256(market.MAX_TRAINERS()), 64, "MAX_TRAINERS");
        vm.assertEq(market.MAX_WITNESSES(), 32, "MAX_WITNESSES");
        vm.assertEq(uint256(market.MAX_WINDOW()), 365 days, "MAX_WINDOW");
    }
}
