// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "../base/TestBase.sol";
import {ChunkAggregation} from "../../src/libraries/ChunkAggregation.sol";
import {ChunkAggregationHarness} from "../harness/ChunkAggregationHarness.sol";

/// @notice Exact chunk recomputation: floor division, the per-chunk rules, decoding and its
/// validation, the state encoding, the outer step, and gas for 16 and 32 inputs.
contract ChunkAggregationTest is TestBase {
    /// @dev forge's console address; `log(string,uint256)` calls to it show with `-vv`.
    address internal constant CONSOLE = 0x000000000000000000636F6e736F6c652e6c6f67;

    uint256 internal constant COUNT = 256;
    uint256 internal constant N16_GAS_LIMIT = 3_000_000;
    uint256 internal constant N16_TRIM_ANY_BETA_LIMIT = 4_000_000;
    uint256 internal constant N32_GAS_LIMIT = 7_000_000;

    ChunkAggregationHarness internal h;

    function setUp() public {
        h = new ChunkAggregationHarness();
    }

    // ------------------------------------------------------------------ helpers

    function _row(int256 a, int256 b) internal pure returns (int256[] memory r) {
        r = new int256[](2);
        (r[0], r[1]) = (a, b);
    }

    function _col(int256[] memory values) internal pure returns (int256[][] memory rows) {
        rows = new int256[][](values.length);
        for (uint256 i = 0; i < values.length; ++i) {
            rows[i] = new int256[](1);
            rows[i][0] = values[i];
        }
    }

    function _vals(int256 a, int256 b, int256 c, int256 d) internal pure returns (int256[] memory v) {
        v = new int256[](4);
        (v[0], v[1], v[2], v[3]) = (a, b, c, d);
    }

    /// @dev A 64-bit LCG step in 256-bit words: pseudo-random without allocating memory (keccak
    /// of `abi.encode` would grow memory and inflate the gas measured after it).
    function _next(uint256 x) internal pure returns (uint256) {
        unchecked {
            return x * 6364136223846793005 + 1442695040888963407;
        }
    }

    /// @dev A pseudo-random int8 gradient chunk of `count` values in [-127, 127].
    function _int8Chunk(uint256 seed, uint8 exponent, uint256 count) internal pure returns (bytes memory c) {
        c = new bytes(2 + count);
        c[0] = bytes1(uint8(8));
        c[1] = bytes1(exponent);
        uint256 x = seed;
        for (uint256 j = 0; j < count; ++j) {
            x = _next(x);
            c[2 + j] = bytes1(uint8(int8(int256((x >> 128) % 255) - 127)));
        }
    }

    function _chunks(uint256 n) internal pure returns (bytes[] memory out) {
        out = new bytes[](n);
        for (uint256 i = 0; i < n; ++i) {
            out[i] = _int8Chunk(i, uint8(20 + (i % 15)), COUNT);
        }
    }

    /// @dev A state chunk with weights and momentum of magnitude below 2**40, mixed signs.
    function _state(uint256 count) internal pure returns (bytes memory) {
        int256[] memory w = new int256[](count);
        int256[] memory m = new int256[](count);
        uint256 r = 0x5eed;
        for (uint256 j = 0; j < count; ++j) {
            r = _next(r);
            w[j] = int256(r % (1 << 41)) - int256(1 << 40);
            m[j] = int256((r >> 64) % (1 << 41)) - int256(1 << 40);
        }
        return ChunkAggregation.encodeStateChunk(w, m);
    }

    // ------------------------------------------------------------------ floor division

    function test_floorDiv_negatives_roundDown() public view {
        vm.assertTrue(h.floorDiv(-7, 2) == -4, "-7 / 2 floors to -4");
        vm.assertTrue(h.floorDiv(7, 2) == 3, "7 / 2 floors to 3");
        vm.assertTrue(h.floorDiv(-6, 2) == -3, "exact negative quotient");
        vm.assertTrue(h.floorDiv(-1, 3) == -1, "-1 / 3 floors to -1");
        vm.assertTrue(h.floorDiv(0, 5) == 0, "zero");
        vm.assertTrue(h.floorDiv(-(int256(1) << 45) - 1, 16) == -(int256(1) << 41) - 1, "large negative");
    }

    function test_floorDiv_zeroDivisor_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.NonPositiveDivisor.selector, int256(0)));
        h.floorDiv(1, 0);
    }

    // ------------------------------------------------------------------ rules

    function test_mean_negative_floors() public view {
        int256[][] memory rows = new int256[][](2);
        rows[0] = _row(-1, 1);
        rows[1] = _row(-2, 2);
        int256[] memory out = h.mean(rows);
        vm.assertTrue(out[0] == -2, "floor(-3/2) = -2");
        vm.assertTrue(out[1] == 1, "floor(3/2) = 1");
    }

    function test_coordinateMedian_odd_middle() public view {
        int256[] memory v = new int256[](3);
        (v[0], v[1], v[2]) = (3, -1, 2);
        vm.assertTrue(h.coordinateMedian(_col(v))[0] == 2, "middle of -1, 2, 3");
    }

    function test_coordinateMedian_even_floorOfMiddlePair() public view {
        // sorted -4, -3, 1, 2: floor((-3 + 1) / 2) = -1
        vm.assertTrue(h.coordinateMedian(_col(_vals(1, -4, 2, -3)))[0] == -1, "even, mixed signs");
        // sorted -9, -4, -3, 5: floor((-4 - 3) / 2) = -4 (truncation would give -3)
        vm.assertTrue(h.coordinateMedian(_col(_vals(-3, 5, -9, -4)))[0] == -4, "even, negative odd sum");
        int256[] memory two = new int256[](2);
        (two[0], two[1]) = (-3, -4);
        vm.assertTrue(h.coordinateMedian(_col(two))[0] == -4, "n = 2");
    }

    function test_trimmedMean_dropsExtremes_floors() public view {
        int256[] memory v = new int256[](10);
        (v[0], v[1]) = (100, -100);
        // v[2 .. 10) = 1 .. 8
        for (uint256 i = 2; i < 10; ++i) {
            v[i] = int256(i) - 1;
        }
        // t = floor(1000 * 10 / 10000) = 1: mean of 1..8 = 4.5 -> 4
        vm.assertTrue(h.trimmedMean(_col(v), 1000)[0] == 4, "trimmed mean of 1..8");
        // v[2 .. 10) = -1 .. -8
        for (uint256 i = 2; i < 10; ++i) {
            v[i] = -v[i];
        }
        vm.assertTrue(h.trimmedMean(_col(v), 1000)[0] == -5, "floor(-4.5) = -5");
        // t = floor(999 * 10 / 10000) = 0: plain mean (including the extremes)
        vm.assertTrue(h.trimmedMean(_col(v), 999)[0] == -4, "t = 0 is the mean: floor(-36/10)");
    }

    function test_trimCount_invalid_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.InvalidRuleParam.selector, uint8(1), uint32(5000)));
        h.trimCount(1, 5000, 4);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.InvalidRuleParam.selector, uint8(0), uint32(1)));
        h.trimCount(0, 1, 4);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.UnsupportedRule.selector, uint8(3)));
        h.trimCount(3, 1, 4);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.BadInputCount.selector, uint256(33)));
        h.trimCount(0, 0, 33);
    }

    // ------------------------------------------------------------------ decoding

    function test_decodeGradientChunk_int8AndInt16_succeeds() public view {
        bytes memory c8 = hex"08057f81ff00";
        (uint256 e, int256[] memory q) = h.decodeGradientChunk(c8, 8, 4);
        vm.assertEq(e, 5, "exponent");
        vm.assertTrue(q[0] == 127 && q[1] == -127 && q[2] == -1 && q[3] == 0, "int8 values");
        int256[] memory grid = h.dequantize(q, e);
        vm.assertTrue(grid[1] == -127 * 32 && grid[2] == -32, "q << e");
        bytes memory c16 = hex"101a7fff8001fffe";
        (e, q) = h.decodeGradientChunk(c16, 16, 3);
        vm.assertEq(e, 26, "exponent at the int16 cap");
        vm.assertTrue(q[0] == 32767 && q[1] == -32767 && q[2] == -2, "int16 values");
    }

    function test_decodeGradientChunk_badLength_reverts() public {
        vm.expectRevert(
            abi.encodeWithSelector(ChunkAggregation.BadGradientChunkLength.selector, uint256(0), uint256(5), uint256(6))
        );
        h.decodeGradientChunk(hex"0805010203", 8, 4);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.GradientChunkTooShort.selector, uint256(0), uint256(1)));
        h.decodeGradientChunk(hex"08", 8, 0);
    }

    function test_decodeGradientChunk_bitsMismatch_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.BitsMismatch.selector, uint256(0), uint8(8), uint8(16)));
        h.decodeGradientChunk(hex"1005000100020003", 8, 3);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.UnsupportedBits.selector, uint8(4)));
        h.decodeGradientChunk(hex"0405", 4, 0);
    }

    function test_decodeGradientChunk_exponentOverCap_reverts() public {
        vm.expectRevert(
            abi.encodeWithSelector(ChunkAggregation.ExponentOverCap.selector, uint256(0), uint8(35), uint256(34))
        );
        h.decodeGradientChunk(hex"082301", 8, 1);
        vm.expectRevert(
            abi.encodeWithSelector(ChunkAggregation.ExponentOverCap.selector, uint256(0), uint8(27), uint256(26))
        );
        h.decodeGradientChunk(hex"101b0001", 16, 1);
    }

    function test_decodeGradientChunk_minInt8_reverts() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                ChunkAggregation.QuantizedValueOutOfRange.selector, uint256(0), uint256(1), int256(-128)
            )
        );
        h.decodeGradientChunk(hex"0800018002", 8, 3);
    }

    function test_recompute_minInt8InSecondChunk_reverts() public {
        bytes[] memory chunks = new bytes[](2);
        chunks[0] = hex"08000102";
        chunks[1] = hex"08000180";
        vm.expectRevert(
            abi.encodeWithSelector(
                ChunkAggregation.QuantizedValueOutOfRange.selector, uint256(1), uint256(1), int256(-128)
            )
        );
        h.recomputeStateChunk(chunks, 8, 2, 0, _state(2), 700_000, 900_000);
    }

    function test_recompute_chunkLengthNotStateCount_reverts() public {
        bytes[] memory chunks = new bytes[](1);
        chunks[0] = hex"0800010203";
        vm.expectRevert(
            abi.encodeWithSelector(ChunkAggregation.BadGradientChunkLength.selector, uint256(0), uint256(5), uint256(4))
        );
        h.recomputeStateChunk(chunks, 8, 0, 0, _state(2), 700_000, 900_000);
    }

    function test_recompute_unsupportedRule_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.UnsupportedRule.selector, uint8(5)));
        h.recomputeStateChunk(_chunks(1), 8, 5, 100, _state(COUNT), 700_000, 900_000);
    }

    // ------------------------------------------------------------------ state chunks and the step

    function test_stateChunk_roundTrip_succeeds() public view {
        int256[] memory w = _vals(-1, type(int64).min, type(int64).max, 0x0102030405060708);
        int256[] memory m = _vals(1, -2, 3, -(int256(1) << 45));
        bytes memory c = h.encodeStateChunk(w, m);
        vm.assertEq(c.length, 64, "16 bytes per coordinate");
        vm.assertEq(uint256(uint8(c[0])), 0xff, "big-endian -1");
        vm.assertEq(uint256(uint8(c[31])), 0x08, "last byte of weight 3");
        (int256[] memory w2, int256[] memory m2) = h.decodeStateChunk(c);
        for (uint256 i = 0; i < 4; ++i) {
            vm.assertTrue(w2[i] == w[i] && m2[i] == m[i], "round trip");
        }
        vm.assertEq(keccak256(h.encodeStateChunk(w2, m2)), keccak256(c), "re-encoding is identical");
    }

    function test_decodeStateChunk_badLength_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.BadStateChunkLength.selector, uint256(24)));
        h.decodeStateChunk(new bytes(24));
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.BadStateChunkLength.selector, uint256(0)));
        h.decodeStateChunk(new bytes(0));
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.BadStateChunkLength.selector, uint256(16 * 257)));
        h.decodeStateChunk(new bytes(16 * 257));
    }

    function test_nesterovStep_handComputed_succeeds() public view {
        int256[] memory w = new int256[](1);
        int256[] memory m = new int256[](1);
        int256[] memory d = new int256[](1);
        (w[0], m[0], d[0]) = (1000, -300, 77);
        // M = q16(900000) = 58982, L = q16(700000) = 45875
        // m' = ((58982 * -300) >> 16) + 77 = floor(-17694600 / 65536) + 77 = -270 + 77 = -193
        // v = 77 + ((58982 * -193) >> 16) = 77 + floor(-11383526 / 65536) = 77 - 174 = -97
        // step = 0 * v + ((45875 * -97) >> 16) = floor(-4449875 / 65536) = -68; theta' = 1068
        (int256[] memory w2, int256[] memory m2) = h.nesterovStep(w, m, d, 700_000, 900_000);
        vm.assertTrue(m2[0] == -193, "momentum");
        vm.assertTrue(w2[0] == 1068, "weights");
    }

    function test_nesterovStep_bounds_revert() public {
        int256[] memory w = new int256[](1);
        int256[] memory m = new int256[](1);
        int256[] memory d = new int256[](1);
        w[0] = int256(1) << 46;
        vm.expectRevert(
            abi.encodeWithSelector(ChunkAggregation.StateOutOfBounds.selector, uint8(0), uint256(0), int256(1) << 46)
        );
        h.nesterovStep(w, m, d, 700_000, 900_000);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.InvalidLearningRate.selector, uint32(0)));
        h.nesterovStep(w, m, d, 0, 900_000);
        vm.expectRevert(abi.encodeWithSelector(ChunkAggregation.InvalidMomentum.selector, uint32(1_000_000)));
        h.nesterovStep(w, m, d, 700_000, 1_000_000);
    }

    // ------------------------------------------------------------------ the state bound: saturation

    /// @dev The largest magnitude a weight or a momentum value may hold (`2**46 - 1`).
    int256 internal constant LIMIT = (int256(1) << 46) - 1;
    /// @dev The largest magnitude of an aggregate (`|delta| < 2**41`).
    int256 internal constant DELTA_MAX = (int256(1) << 41) - 1;

    /// @dev `x` clamped to `[-LIMIT, LIMIT]`.
    function _sat(int256 x) internal pure returns (int256) {
        return x > LIMIT ? LIMIT : (x < -LIMIT ? -LIMIT : x);
    }

    /// @dev Maps any int256 into `[lo, hi]`, keeping values already inside (fuzz edge cases survive).
    function _boundInt(int256 x, int256 lo, int256 hi) internal pure returns (int256) {
        if (x >= lo && x <= hi) return x;
        return lo + int256(uint256(x) % uint256(hi - lo + 1));
    }

    /// @dev The documented saturating step in plain checked int256 arithmetic, with the unsplit
    /// product `(L * v) >> 16` (exact in int256): a reference independent of the library's assembly.
    function _refStep(int256 w, int256 m, int256 d, uint32 lrPpm, uint32 momPpm)
        internal
        pure
        returns (int256 w2, int256 m2)
    {
        int256 bigM = int256((uint256(momPpm) << 16) / 1_000_000);
        int256 bigL = int256((uint256(lrPpm) << 16) / 1_000_000);
        m2 = _sat(((bigM * m) >> 16) + d);
        w2 = _sat(w - ((bigL * (d + ((bigM * m2) >> 16))) >> 16));
    }

    /// @dev One int8 chunk of `count` values, all `q`, at `exponent`.
    function _constChunk(int8 q, uint8 exponent, uint256 count) internal pure returns (bytes memory c) {
        c = new bytes(2 + count);
        c[0] = bytes1(uint8(8));
        c[1] = bytes1(exponent);
        for (uint256 j = 0; j < count; ++j) {
            c[2 + j] = bytes1(uint8(q));
        }
    }

    /// @dev Issue 10 finding 9: a Byzantine trainer's maximal gradient (`127 << 34` everywhere)
    /// on a state at the bound. Before saturation the recomputation reverted
    /// `StateOutOfBounds(4, 0, ...)`, so neither an honest nor a forged state there was checkable.
    function test_recompute_atStateBound_saturates() public view {
        bytes[] memory chunks = new bytes[](1);
        int256 delta = int256(127) << 34;
        for (uint256 s = 0; s < 2; ++s) {
            int256 sign = s == 0 ? int256(1) : -1;
            chunks[0] = _constChunk(int8(int256(127) * sign), 34, 3);
            // coordinate 0 saturates the weights, 1 the weights and (at momentum ~1) the momentum,
            // 2 stays inside the bound
            int256[] memory w = new int256[](3);
            int256[] memory m = new int256[](3);
            (w[0], w[1], w[2]) = (-sign * (LIMIT - 5), -sign * LIMIT, 0);
            (m[0], m[1], m[2]) = (0, sign * LIMIT, 0);
            bytes memory prev = h.encodeStateChunk(w, m);
            for (uint256 k = 0; k < 2; ++k) {
                uint32 mom = k == 0 ? 900_000 : 999_999;
                bytes memory out = h.recomputeStateChunk(chunks, 8, 0, 0, prev, 700_000, mom);
                (int256[] memory w2, int256[] memory m2) = h.decodeStateChunk(out);
                vm.assertTrue(w2[0] == -sign * LIMIT && w2[1] == -sign * LIMIT, "the weights saturate");
                if (k == 1) vm.assertTrue(m2[1] == sign * LIMIT, "the momentum saturates");
                for (uint256 j = 0; j < 3; ++j) {
                    (int256 rw, int256 rm) = _refStep(w[j], m[j], sign * delta, 700_000, mom);
                    vm.assertTrue(w2[j] == rw && m2[j] == rm, "the saturating reference");
                }
                vm.assertTrue(w2[2] > -LIMIT && w2[2] < LIMIT, "coordinate 2 inside the bound");
            }
        }
    }

    /// @dev Every in-bound input gives the reference's saturated result, inside the bound.
    function testFuzz_nesterovStep_matchesSaturatingReference(int256 w, int256 m, int256 d, uint32 lr, uint32 mom)
        public
        view
    {
        int256[] memory ws = new int256[](1);
        int256[] memory ms = new int256[](1);
        int256[] memory ds = new int256[](1);
        ws[0] = _boundInt(w, -LIMIT, LIMIT);
        ms[0] = _boundInt(m, -LIMIT, LIMIT);
        ds[0] = _boundInt(d, -DELTA_MAX, DELTA_MAX);
        lr = uint32(bound(lr, 1, type(uint32).max));
        mom = uint32(bound(mom, 0, 999_999));
        (int256[] memory w2, int256[] memory m2) = h.nesterovStep(ws, ms, ds, lr, mom);
        (int256 rw, int256 rm) = _refStep(ws[0], ms[0], ds[0], lr, mom);
        vm.assertTrue(w2[0] == rw, "weights as the reference");
        vm.assertTrue(m2[0] == rm, "momentum as the reference");
        vm.assertTrue(w2[0] >= -LIMIT && w2[0] <= LIMIT && m2[0] >= -LIMIT && m2[0] <= LIMIT, "inside the bound");
    }

    /// @dev Whole-chunk recomputation near the bound: maximal-exponent inputs, states within
    /// `2**40` of either bound, large coefficients; each coordinate equals mean + the reference step.
    function testFuzz_recompute_nearBound_matchesReference(uint256 seed, uint32 lr, uint32 mom) public view {
        lr = uint32(bound(lr, 1, 20_000_000));
        mom = uint32(bound(mom, 0, 999_999));
        uint256 n = 1 + seed % 5;
        uint256 count = 1 + (seed >> 8) % 24;
        bytes[] memory chunks = new bytes[](n);
        for (uint256 i = 0; i < n; ++i) {
            chunks[i] = _int8Chunk(seed ^ i, uint8(30 + (i + (seed >> 16)) % 5), count);
        }
        int256[] memory w = new int256[](count);
        int256[] memory m = new int256[](count);
        uint256 r = seed;
        for (uint256 j = 0; j < count; ++j) {
            r = _next(r);
            int256 side = (r >> 200) & 1 == 0 ? int256(1) : -1;
            w[j] = side * (LIMIT - int256((r >> 64) % (1 << 40)));
            m[j] = ((r >> 201) & 1 == 0 ? int256(1) : -1) * (LIMIT - int256((r >> 128) % (1 << 40)));
        }
        bytes memory out = h.recomputeStateChunk(chunks, 8, 0, 0, h.encodeStateChunk(w, m), lr, mom);
        int256[] memory agg = h.aggregateGradientChunks(chunks, 8, count, 0, 0);
        (int256[] memory w2, int256[] memory m2) = h.decodeStateChunk(out);
        for (uint256 j = 0; j < count; ++j) {
            (int256 rw, int256 rm) = _refStep(w[j], m[j], agg[j], lr, mom);
            vm.assertTrue(w2[j] == rw && m2[j] == rm, "coordinate as the reference");
        }
    }

    /// @dev The fused path (bytes -> column sort -> rule) agrees with decode + dequantize + the
    /// matrix rules.
    function test_aggregateGradientChunks_matchesMatrixRules() public view {
        uint256 n = 6;
        bytes[] memory chunks = new bytes[](n);
        int256[][] memory rows = new int256[][](n);
        for (uint256 i = 0; i < n; ++i) {
            chunks[i] = _int8Chunk(100 + i, uint8(i * 6), 16);
            (uint256 e, int256[] memory q) = h.decodeGradientChunk(chunks[i], 8, 16);
            rows[i] = h.dequantize(q, e);
        }
        vm.assertEq(
            keccak256(abi.encode(h.aggregateGradientChunks(chunks, 8, 16, 0, 0))),
            keccak256(abi.encode(h.mean(rows))),
            "mean"
        );
        vm.assertEq(
            keccak256(abi.encode(h.aggregateGradientChunks(chunks, 8, 16, 1, 2000))),
            keccak256(abi.encode(h.trimmedMean(rows, 2000))),
            "trimmed mean"
        );
        vm.assertEq(
            keccak256(abi.encode(h.aggregateGradientChunks(chunks, 8, 16, 2, 0))),
            keccak256(abi.encode(h.coordinateMedian(rows))),
            "median"
        );
    }

    // ------------------------------------------------------------------ gas

    /// @dev Log through forge's console with a low-level staticcall (the address has no code,
    /// so a high-level call would fail Solidity's code-size check).
    function _log(string memory label, uint256 value) internal view {
        (bool ok,) = CONSOLE.staticcall(abi.encodeWithSignature("log(string,uint256)", label, value));
        ok; // the console never reverts; nothing to do either way
    }

    function _gas(uint256 n, uint8 rule, uint32 param) internal view returns (uint256 used) {
        bytes[] memory chunks = _chunks(n);
        bytes memory state = _state(COUNT);
        uint256 g = gasleft();
        bytes memory out = h.recomputeStateChunk(chunks, 8, rule, param, state, 700_000, 900_000);
        used = g - gasleft();
        vm.assertEq(out.length, 16 * COUNT, "a full state chunk");
    }

    function test_gas_n16_mean() public view {
        uint256 used = _gas(16, 0, 0);
        _log("recomputeStateChunk n=16 mean", used);
        vm.assertLt(used, N16_GAS_LIMIT, "n=16 mean under 3M gas");
    }

    function test_gas_n16_trimmedMean() public view {
        uint256 used = _gas(16, 1, 1000);
        _log("recomputeStateChunk n=16 trimmedMean(1000bps)", used);
        vm.assertLt(used, N16_GAS_LIMIT, "n=16 trimmed mean under 3M gas");
    }

    function test_gas_n16_median() public view {
        uint256 used = _gas(16, 2, 0);
        _log("recomputeStateChunk n=16 median", used);
        vm.assertLt(used, N16_GAS_LIMIT, "n=16 median under 3M gas");
    }

    function test_gas_n16_trimmedMeanMaxBeta() public view {
        uint256 used = _gas(16, 1, 4999); // t = 7: only the two middle values are kept
        _log("recomputeStateChunk n=16 trimmedMean(4999bps)", used);
        vm.assertLt(used, N16_GAS_LIMIT, "n=16 trimmed mean at the largest beta under 3M gas");
    }

    function test_gas_n16_trimmedMeanBetas() public view {
        uint32[5] memory betas = [uint32(2000), 3000, 3500, 4000, 4500];
        for (uint256 b = 0; b < betas.length; ++b) {
            uint256 used = _gas(16, 1, betas[b]);
            _log(string.concat("recomputeStateChunk n=16 trimmedMean bps ", _str(betas[b])), used);
            // Mid-range betas (t = 3..6 of 16) keep two bounded sets per coordinate and miss the
            // 3M target (about 3.0-3.4M with the 5t <= n switch); bound them loosely so regressions still show.
            vm.assertLt(used, N16_TRIM_ANY_BETA_LIMIT, "n=16 trimmed mean under the any-beta bound");
        }
    }

    function _str(uint256 x) internal pure returns (string memory) {
        bytes memory digits = new bytes(4);
        for (uint256 i = 4; i > 0; --i) {
            digits[i - 1] = bytes1(uint8(48 + (x % 10)));
            x /= 10;
        }
        return string(digits);
    }

    function test_gas_n32_mean() public view {
        uint256 used = _gas(32, 0, 0);
        _log("recomputeStateChunk n=32 mean", used);
        vm.assertLt(used, N32_GAS_LIMIT, "n=32 mean under the bound");
    }

    function test_gas_n32_trimmedMean() public view {
        uint256 used = _gas(32, 1, 1000);
        _log("recomputeStateChunk n=32 trimmedMean(1000bps)", used);
        vm.assertLt(used, N32_GAS_LIMIT, "n=32 trimmed mean under the bound");
    }

    function test_gas_n32_median() public view {
        uint256 used = _gas(32, 2, 0);
        _log("recomputeStateChunk n=32 median", used);
        vm.assertLt(used, N32_GAS_LIMIT, "n=32 median under the bound");
    }
}
