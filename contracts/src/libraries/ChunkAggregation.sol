// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ChunkAggregation
/// @notice Exact on-chain recomputation of one CHUNK_SIZE-coordinate chunk of a round result,
/// bit-identical to the Python protocol (`syncline.protocol`): decode the trainers' quantized
/// gradient chunks, dequantize them onto the Q32 grid (`q << e`), aggregate them per coordinate
/// (Mean, TrimmedMean, CoordinateMedian) and apply the Nesterov outer step to the previous state
/// chunk, saturating weights and momentum at `+-(2**46 - 1)` (`nesterovStep`). Every division is a true floor (also for negatives) and every right shift arithmetic,
/// as in Python. Krum, MultiKrum and CenteredClip need whole-vector distances and are out of scope.
/// @dev Chunk encodings (see `syncline/protocol/chunking.py`):
/// - gradient chunk: `uint8 bits || uint8 exponent || value_0 .. value_{k-1}`, each value
///   big-endian two's complement in `bits / 8` bytes;
/// - state chunk: `weight_0 .. weight_{k-1} || momentum_0 .. momentum_{k-1}`, each an 8-byte
///   big-endian int64.
library ChunkAggregation {
    // ------------------------------------------------------------------ constants

    /// @notice Coordinates per chunk (`fixed_point.CHUNK_SIZE`).
    uint256 internal constant CHUNK_SIZE = 256;
    /// @notice Most gradient chunks (trainers) one recomputation accepts.
    uint256 internal constant MAX_INPUTS = 32;
    /// @notice Exponent caps per width (`quantization.MAX_GRAD_EXP_INT8/INT16`).
    uint256 internal constant MAX_GRAD_EXP_INT8 = 34;
    uint256 internal constant MAX_GRAD_EXP_INT16 = 26;
    /// @notice Aggregation rules (values of `SynclineTypes.AggregationRule`).
    uint8 internal constant RULE_MEAN = 0;
    uint8 internal constant RULE_TRIMMED_MEAN = 1;
    uint8 internal constant RULE_COORDINATE_MEDIAN = 2;
    /// @notice Basis points denominator of the trimmed mean's beta.
    uint256 internal constant BPS = 10_000;
    /// @notice ppm denominator of the optimizer coefficients.
    uint256 internal constant PPM = 1_000_000;
    /// @notice Fractional bits of the Q16 optimizer coefficients.
    uint256 internal constant Q16_BITS = 16;
    /// @notice Inputs of the step need `|theta|, |m| < 2**46` and `|delta| < 2**41`; results
    /// saturate at `+-STATE_MAX` (see `nesterovStep`).
    uint256 internal constant STATE_BOUND_BITS = 46;
    uint256 internal constant DELTA_BOUND_BITS = 41;
    /// @notice The largest magnitude of a weight or a momentum value (`outer_optimizer.STATE_MAX`).
    int256 internal constant STATE_MAX = int256((uint256(1) << STATE_BOUND_BITS) - 1);

    /// @notice Which value `StateOutOfBounds` refers to (the order of Python's checks). The
    /// step's results saturate instead of reverting, so `_AFTER` only reports a value outside
    /// int64 handed to `encodeStateChunk`.
    uint8 internal constant BOUND_THETA = 0;
    uint8 internal constant BOUND_MOMENTUM = 1;
    uint8 internal constant BOUND_DELTA = 2;
    uint8 internal constant BOUND_MOMENTUM_AFTER = 3;
    uint8 internal constant BOUND_THETA_AFTER = 4;

    // ------------------------------------------------------------------ errors

    /// @notice The task's quantization width is neither 8 nor 16 bits.
    error UnsupportedBits(uint8 bits);
    /// @notice Gradient chunk `index` is shorter than its 2-byte header.
    error GradientChunkTooShort(uint256 index, uint256 length);
    /// @notice Gradient chunk `index` declares `got` bits; the task uses `expected`.
    error BitsMismatch(uint256 index, uint8 expected, uint8 got);
    /// @notice Gradient chunk `index` has an exponent above the cap for its width.
    error ExponentOverCap(uint256 index, uint8 exponent, uint256 cap);
    /// @notice Gradient chunk `index` is not `2 + count * width` bytes long.
    error BadGradientChunkLength(uint256 index, uint256 length, uint256 expected);
    /// @notice Quantized value at coordinate `coordinate` of chunk `index` is `-qmax - 1`.
    error QuantizedValueOutOfRange(uint256 index, uint256 coordinate, int256 value);
    /// @notice The number of gradient chunks is outside `1 .. MAX_INPUTS`.
    error BadInputCount(uint256 n);
    /// @notice Rows of an aggregation matrix do not all have `expected` coordinates.
    error RaggedInputs(uint256 row, uint256 length, uint256 expected);
    /// @notice The rule is not recomputable per chunk (or unknown).
    error UnsupportedRule(uint8 rule);
    /// @notice The rule's parameter is invalid (TrimmedMean needs `< 5000` bps, the others 0).
    error InvalidRuleParam(uint8 rule, uint32 param);
    /// @notice A state chunk is not `16 * k` bytes with `1 <= k <= CHUNK_SIZE`.
    error BadStateChunkLength(uint256 length);
    /// @notice Weights, momentum and aggregate have different lengths.
    error LengthMismatch(uint256 weights, uint256 momentum, uint256 aggregate);
    /// @notice The outer learning rate must be positive.
    error InvalidLearningRate(uint32 lrPpm);
    /// @notice The outer momentum must be below 1 (in ppm).
    error InvalidMomentum(uint32 momPpm);
    /// @notice A state value violates its bound (`what`: BOUND_* constant).
    error StateOutOfBounds(uint8 what, uint256 coordinate, int256 value);
    /// @notice Floor division by a non-positive divisor.
    error NonPositiveDivisor(int256 divisor);

    // ------------------------------------------------------------------ top level

    /// @notice Recompute one state chunk of a round result.
    /// @param gradientChunks The trainers' gradient chunk contents (same chunk index), `1..32` of them.
    /// @param bits The task's quantization width (8 or 16).
    /// @param rule Aggregation rule: Mean (0), TrimmedMean (1) or CoordinateMedian (2).
    /// @param ruleParam TrimmedMean's beta in bps (`< 5000`); 0 for the other rules.
    /// @param prevStateChunk The previous state chunk (weights then momentum, int64 big-endian).
    /// @param lrPpm Outer learning rate in ppm (`> 0`).
    /// @param momPpm Outer momentum in ppm (`< 1_000_000`).
    /// @return newStateChunk The new state chunk, encoded like `prevStateChunk`.
    function recomputeStateChunk(
        bytes[] memory gradientChunks,
        uint8 bits,
        uint8 rule,
        uint32 ruleParam,
        bytes memory prevStateChunk,
        uint32 lrPpm,
        uint32 momPpm
    ) internal pure returns (bytes memory newStateChunk) {
        _checkCoefficients(lrPpm, momPpm);
        uint256 trim = trimCount(rule, ruleParam, gradientChunks.length);
        (int256[] memory weights, int256[] memory momentum) = decodeStateChunk(prevStateChunk);
        int256[] memory aggregate = aggregateGradientChunks(gradientChunks, bits, weights.length, rule, trim);
        (int256[] memory newWeights, int256[] memory newMomentum) =
            nesterovStep(weights, momentum, aggregate, lrPpm, momPpm);
        newStateChunk = encodeStateChunk(newWeights, newMomentum);
    }

    /// @notice Decode, dequantize and aggregate gradient chunks of `count` coordinates each.
    /// @dev Works column by column: each coordinate's `n` values are read straight from the chunk
    /// bytes and summed or insertion-sorted into small reused memory arrays that keep only the
    /// order statistics the rule needs (no `n x count` matrix, no full sort).
    /// @param trim Values dropped at each end (TrimmedMean's `t`; see `trimCount`).
    function aggregateGradientChunks(bytes[] memory gradientChunks, uint8 bits, uint256 count, uint8 rule, uint256 trim)
        internal
        pure
        returns (int256[] memory aggregate)
    {
        uint256 n = gradientChunks.length;
        if (n == 0 || n > MAX_INPUTS) revert BadInputCount(n);
        uint256 width = _width(bits);
        // Headers first. `table` holds (address of the first value byte, exponent) per chunk.
        uint256[] memory table = new uint256[](2 * n);
        for (uint256 i = 0; i < n; ++i) {
            bytes memory chunk = gradientChunks[i];
            table[2 * i + 1] = checkGradientHeader(chunk, bits, count, i);
            uint256 ptr;
            // assembly: the address of the chunk's first value byte (past length word and header).
            assembly ("memory-safe") {
                ptr := add(chunk, 34)
            }
            table[2 * i] = ptr;
        }
        // mode 0: plain floor mean (Mean, TrimmedMean with t = 0); 1: trimmed mean with few values
        // trimmed (5t <= n): keep the t smallest and the t smallest negated values (the t
        // largest); 3: trimmed mean with many trimmed: keep the n - t smallest; 2: median: keep
        // the n/2 + 1 smallest, whose top one or two are the middle ones.
        uint256 mode = rule == RULE_COORDINATE_MEDIAN ? 2 : (trim == 0 ? 0 : (5 * trim <= n ? 1 : 3));
        uint256 cap = mode == 2 ? n / 2 + 1 : (mode == 3 ? n - trim : trim);
        int256 minValue = width == 1 ? -128 : -32768; // -qmax - 1, the one invalid value
        aggregate = new int256[](count);
        // Slot 0 of each is a sentinel (the smallest int256) so insertion walks need no bound test.
        int256[] memory low = new int256[](cap + 1);
        int256[] memory high = new int256[](cap + 1);
        low[0] = type(int256).min;
        high[0] = type(int256).min;
        bool bad;
        // assembly: the hot loop (count * n values) without bounds checks, checked arithmetic or
        // per-value error branches. Per coordinate j and chunk i: `sar` of the word at
        // ptr_i + j * width sign-extends the big-endian value q; -qmax - 1 only sets `bad`
        // (reported after the loop); the grid value x = `q << e` is exact (|x| < 2**41).
        // - mode 0: sum all x; floor(sum / n).
        // - mode 1: sum all x and keep the t smallest x (in `low`) and the t smallest -x (in
        //   `high`, i.e. the t largest x); since 2t < n they are disjoint positions of the sorted
        //   column, so the kept sum is sum - sum(low) + sum(high); floor(kept / (n - 2t)).
        // - mode 3: keep the n - t smallest x; the kept sum is their sum minus that of the t
        //   smallest of them; floor(kept / (n - 2t)).
        // - mode 2: keep the n/2 + 1 smallest x; the median is the largest of them (odd n) or
        //   `sar(1, a + b)` = floor((a + b) / 2) of the two largest (even n).
        // `insert` keeps base[0 .. cap) ascending: while fewer than cap values are held, x is
        // insertion-sorted in; afterwards x replaces the largest if smaller (greater values shift
        // up one slot; the sentinel stops the walk). The result is the same multiset as a full
        // sort's first cap values. Sums of at most 32 values below 2**41 cannot overflow. Only
        // `aggregate`, `low` and `high` (allocated above, in bounds) are written.
        assembly ("memory-safe") {
            function insert(base, filled, cap_, x) {
                let p := add(base, shl(5, filled))
                if iszero(lt(filled, cap_)) {
                    p := add(base, shl(5, sub(cap_, 1)))
                    if iszero(slt(x, mload(p))) { leave }
                }
                for {} 1 {} {
                    let prev := mload(sub(p, 32))
                    if iszero(sgt(prev, x)) { break }
                    mstore(p, prev)
                    p := sub(p, 32)
                }
                mstore(p, x)
            }
            function total(base, len) -> s {
                for { let p := base } lt(p, add(base, shl(5, len))) { p := add(p, 32) } { s := add(s, mload(p)) }
            }
            let tab := add(table, 32)
            let tabEnd := add(tab, shl(6, n))
            let shift := sub(256, shl(3, width))
            let lowBase := add(low, 64)
            let highBase := add(high, 64)
            let outBase := add(aggregate, 32)
            let kept := sub(n, shl(1, trim))
            for { let j := 0 } lt(j, count) { j := add(j, 1) } {
                let off := mul(j, width)
                let sum := 0
                let value
                switch mode
                case 0 {
                    for { let t := tab } lt(t, tabEnd) { t := add(t, 64) } {
                        let q := sar(shift, mload(add(mload(t), off)))
                        bad := or(bad, eq(q, minValue))
                        sum := add(sum, shl(mload(add(t, 32)), q))
                    }
                }
                case 1 {
                    let filled := 0
                    for { let t := tab } lt(t, tabEnd) { t := add(t, 64) } {
                        let q := sar(shift, mload(add(mload(t), off)))
                        bad := or(bad, eq(q, minValue))
                        let x := shl(mload(add(t, 32)), q)
                        sum := add(sum, x)
                        insert(lowBase, filled, cap, x)
                        insert(highBase, filled, cap, sub(0, x))
                        filled := add(filled, 1)
                    }
                    sum := add(sub(sum, total(lowBase, cap)), total(highBase, cap))
                }
                case 3 {
                    let filled := 0
                    for { let t := tab } lt(t, tabEnd) { t := add(t, 64) } {
                        let q := sar(shift, mload(add(mload(t), off)))
                        bad := or(bad, eq(q, minValue))
                        insert(lowBase, filled, cap, shl(mload(add(t, 32)), q))
                        filled := add(filled, 1)
                    }
                    sum := sub(total(lowBase, cap), total(lowBase, trim))
                }
                default {
                    let filled := 0
                    for { let t := tab } lt(t, tabEnd) { t := add(t, 64) } {
                        let q := sar(shift, mload(add(mload(t), off)))
                        bad := or(bad, eq(q, minValue))
                        insert(lowBase, filled, cap, shl(mload(add(t, 32)), q))
                        filled := add(filled, 1)
                    }
                    let top := add(lowBase, shl(5, sub(cap, 1)))
                    value := mload(top)
                    if iszero(and(n, 1)) { value := sar(1, add(value, mload(sub(top, 32)))) }
                }
                if iszero(eq(mode, 2)) {
                    value := sdiv(sum, kept)
                    if and(slt(sum, 0), iszero(iszero(smod(sum, kept)))) { value := sub(value, 1) }
                }
                mstore(add(outBase, shl(5, j)), value)
            }
        }
        if (bad) _revertFirstOutOfRange(table, n, count, width, minValue);
    }

    /// @dev Find the first (coordinate-major) value equal to `minValue` and revert with it.
    function _revertFirstOutOfRange(uint256[] memory table, uint256 n, uint256 count, uint256 width, int256 minValue)
        private
        pure
    {
        for (uint256 j = 0; j < count; ++j) {
            for (uint256 i = 0; i < n; ++i) {
                if (_readValue(table[2 * i] + j * width, width) == minValue) {
                    revert QuantizedValueOutOfRange(i, j, minValue);
                }
            }
        }
    }

    // ------------------------------------------------------------------ gradient chunks

    /// @notice Validate a gradient chunk's header and length; returns its exponent.
    /// @param chunk The chunk content.
    /// @param bits The task's width (8 or 16); the chunk's bits byte must equal it.
    /// @param count Expected coordinates (the state chunk's).
    /// @param index The chunk's position, for error values.
    function checkGradientHeader(bytes memory chunk, uint8 bits, uint256 count, uint256 index)
        internal
        pure
        returns (uint256 exponent)
    {
        uint256 width = _width(bits);
        if (chunk.length < 2) revert GradientChunkTooShort(index, chunk.length);
        uint8 got = uint8(chunk[0]);
        if (got != bits) revert BitsMismatch(index, bits, got);
        uint8 e = uint8(chunk[1]);
        uint256 cap = width == 1 ? MAX_GRAD_EXP_INT8 : MAX_GRAD_EXP_INT16;
        if (e > cap) revert ExponentOverCap(index, e, cap);
        uint256 expected = 2 + count * width;
        if (chunk.length != expected) revert BadGradientChunkLength(index, chunk.length, expected);
        exponent = e;
    }

    /// @notice Whether a gradient chunk of `count` coordinates is one the protocol accepts: the
    /// task's bits, an exponent within the cap, the exact length, and no value equal to `-qmax - 1`.
    /// Never reverts for any content (only for `bits` other than 8 or 16).
    function isWellFormedGradientChunk(bytes memory chunk, uint8 bits, uint256 count) internal pure returns (bool) {
        uint256 width = _width(bits);
        if (chunk.length < 2 || uint8(chunk[0]) != bits) return false;
        uint256 cap = width == 1 ? MAX_GRAD_EXP_INT8 : MAX_GRAD_EXP_INT16;
        if (uint8(chunk[1]) > cap || chunk.length != 2 + count * width) return false;
        int256 minValue = width == 1 ? -128 : -32768;
        uint256 ptr;
        // assembly: the address of the first value byte (past the length word and the header).
        assembly ("memory-safe") {
            ptr := add(chunk, 34)
        }
        for (uint256 j = 0; j < count; ++j) {
            if (_readValue(ptr + j * width, width) == minValue) return false;
        }
        return true;
    }

    /// @notice Decode a gradient chunk of `count` coordinates: its exponent and quantized values.
    /// @dev Validates as `QuantizedGradient` does: bits, exponent cap, length, `|q| <= qmax`.
    function decodeGradientChunk(bytes memory chunk, uint8 bits, uint256 count)
        internal
        pure
        returns (uint256 exponent, int256[] memory values)
    {
        exponent = checkGradientHeader(chunk, bits, count, 0);
        uint256 width = _width(bits);
        int256 minValue = width == 1 ? -128 : -32768;
        values = new int256[](count);
        uint256 ptr;
        // assembly: the address of the first value byte (past the length word and the header).
        assembly ("memory-safe") {
            ptr := add(chunk, 34)
        }
        for (uint256 j = 0; j < count; ++j) {
            int256 q = _readValue(ptr + j * width, width);
            if (q == minValue) revert QuantizedValueOutOfRange(0, j, q);
            values[j] = q;
        }
    }

    /// @notice Q32 grid values `q << exponent` (exact; `exponent <= 34` keeps them below 2**41).
    function dequantize(int256[] memory values, uint256 exponent) internal pure returns (int256[] memory grid) {
        if (exponent > MAX_GRAD_EXP_INT8) revert ExponentOverCap(0, uint8(exponent), MAX_GRAD_EXP_INT8);
        grid = new int256[](values.length);
        int256 scale = int256(1 << exponent);
        for (uint256 j = 0; j < values.length; ++j) {
            grid[j] = values[j] * scale;
        }
    }

    // ------------------------------------------------------------------ aggregation rules

    /// @notice `t = floor(beta_bps * n / 10000)` for TrimmedMean, 0 for Mean/Median; validates
    /// the rule, its parameter and `1 <= n <= MAX_INPUTS`.
    function trimCount(uint8 rule, uint32 ruleParam, uint256 n) internal pure returns (uint256 t) {
        if (n == 0 || n > MAX_INPUTS) revert BadInputCount(n);
        if (rule == RULE_TRIMMED_MEAN) {
            if (ruleParam >= BPS / 2) revert InvalidRuleParam(rule, ruleParam);
            return (uint256(ruleParam) * n) / BPS;
        }
        if (rule != RULE_MEAN && rule != RULE_COORDINATE_MEDIAN) revert UnsupportedRule(rule);
        if (ruleParam != 0) revert InvalidRuleParam(rule, ruleParam);
    }

    /// @notice `floor(sum / n)` per coordinate of `rows` (`n x count`, row-major like Python).
    function mean(int256[][] memory rows) internal pure returns (int256[] memory) {
        return _aggregateRows(rows, RULE_MEAN, 0);
    }

    /// @notice Drop the `t = floor(betaBps * n / 10000)` smallest and largest values per
    /// coordinate and floor-mean the rest (`betaBps < 5000`).
    function trimmedMean(int256[][] memory rows, uint32 betaBps) internal pure returns (int256[] memory) {
        return _aggregateRows(rows, RULE_TRIMMED_MEAN, trimCount(RULE_TRIMMED_MEAN, betaBps, rows.length));
    }

    /// @notice Per coordinate: the middle value (odd n) or `floor((a + b) / 2)` of the two middle
    /// values (even n).
    function coordinateMedian(int256[][] memory rows) internal pure returns (int256[] memory) {
        return _aggregateRows(rows, RULE_COORDINATE_MEDIAN, 0);
    }

    /// @notice Mathematical floor of `a / b` for `b > 0` (Solidity's `/` truncates toward zero).
    function floorDiv(int256 a, int256 b) internal pure returns (int256 q) {
        if (b <= 0) revert NonPositiveDivisor(b);
        // unchecked: with b > 0, a / b and a % b cannot overflow (only type(int256).min / -1
        // can), and q - 1 runs only when a < 0 and b does not divide a, so b >= 2 and
        // q >= type(int256).min / 2 stays far from the minimum.
        unchecked {
            q = a / b;
            if (a % b != 0 && a < 0) q -= 1;
        }
    }

    // ------------------------------------------------------------------ state chunks

    /// @notice Decode a state chunk into its int64 weights and momentum.
    function decodeStateChunk(bytes memory chunk)
        internal
        pure
        returns (int256[] memory weights, int256[] memory momentum)
    {
        uint256 len = chunk.length;
        if (len == 0 || len % 16 != 0 || len / 16 > CHUNK_SIZE) revert BadStateChunkLength(len);
        uint256 k = len / 16;
        weights = new int256[](k);
        momentum = new int256[](k);
        // assembly: one mload per value; `sar(192, word)` sign-extends its top 8 bytes, the
        // big-endian int64. Reads stay inside `chunk` (the last one ends at its last byte).
        assembly ("memory-safe") {
            let src := add(chunk, 32)
            let wDst := add(weights, 32)
            let mDst := add(momentum, 32)
            let mSrc := add(src, shl(3, k))
            for { let i := 0 } lt(i, k) { i := add(i, 1) } {
                mstore(add(wDst, shl(5, i)), sar(192, mload(add(src, shl(3, i)))))
                mstore(add(mDst, shl(5, i)), sar(192, mload(add(mSrc, shl(3, i)))))
            }
        }
    }

    /// @notice Encode weights and momentum (each int64, equal lengths) as a state chunk.
    function encodeStateChunk(int256[] memory weights, int256[] memory momentum)
        internal
        pure
        returns (bytes memory chunk)
    {
        uint256 k = weights.length;
        if (k == 0 || k > CHUNK_SIZE || momentum.length != k) revert LengthMismatch(k, momentum.length, k);
        _requireInt64(weights, BOUND_THETA_AFTER);
        _requireInt64(momentum, BOUND_MOMENTUM_AFTER);
        chunk = new bytes(16 * k);
        // assembly: write each value's low 8 bytes (its int64 two's complement) in ascending order
        // with one mstore of the value shifted to the top of a word. The 24 zero bytes each store
        // spills past its slot are overwritten by the next value; the last spill zeroes the
        // array's padding and memory past the free memory pointer (unallocated, so harmless).
        assembly ("memory-safe") {
            let dst := add(chunk, 32)
            let mDst := add(dst, shl(3, k))
            for { let i := 0 } lt(i, k) { i := add(i, 1) } {
                mstore(add(dst, shl(3, i)), shl(192, mload(add(weights, shl(5, add(i, 1))))))
            }
            for { let i := 0 } lt(i, k) { i := add(i, 1) } {
                mstore(add(mDst, shl(3, i)), shl(192, mload(add(momentum, shl(5, add(i, 1))))))
            }
        }
    }

    // ------------------------------------------------------------------ outer optimizer

    /// @notice `(ppm << 16) // 1_000_000`, the Q16 coefficient of a ppm value.
    function q16(uint32 ppm) internal pure returns (int256) {
        return int256((uint256(ppm) << Q16_BITS) / PPM);
    }

    /// @notice One Nesterov outer step, exactly `outer_optimizer.nesterov_step`, saturating at the
    /// state bound: `m' = sat(((M*m) >> 16) + delta)`, `v = delta + ((M*m') >> 16)`,
    /// `step = Lh*v + ((Ll*v) >> 16)`, `theta' = sat(theta - step)`, where
    /// `sat(x) = min(max(x, -STATE_MAX), STATE_MAX)` and `STATE_MAX = 2**46 - 1`.
    /// @dev The rule (issue 10, finding 9): inputs outside `|theta|, |m| < 2**46`,
    /// `|delta| < 2**41` revert `StateOutOfBounds` (no honest state holds them); results never
    /// revert. The clamps act on the exact integers after the floor shifts, the new momentum
    /// first (its saturated value is stored and feeds the look-ahead term), then the new weight.
    /// Away from the bound neither clamp changes anything, so those results are the unsaturated
    /// formula's.
    function nesterovStep(
        int256[] memory weights,
        int256[] memory momentum,
        int256[] memory aggregate,
        uint32 lrPpm,
        uint32 momPpm
    ) internal pure returns (int256[] memory newWeights, int256[] memory newMomentum) {
        _checkCoefficients(lrPpm, momPpm);
        uint256 k = weights.length;
        if (momentum.length != k || aggregate.length != k) revert LengthMismatch(k, momentum.length, aggregate.length);
        _requireBounded(weights, STATE_BOUND_BITS, BOUND_THETA);
        _requireBounded(momentum, STATE_BOUND_BITS, BOUND_MOMENTUM);
        _requireBounded(aggregate, DELTA_BOUND_BITS, BOUND_DELTA);
        int256 mq = q16(momPpm);
        int256 lq = q16(lrPpm);
        int256 lrHi = lq >> Q16_BITS;
        int256 lrLo = lq & int256((1 << Q16_BITS) - 1);
        int256 hi = STATE_MAX;
        newWeights = new int256[](k);
        newMomentum = new int256[](k);
        // assembly: the per-coordinate step without checked arithmetic. Python computes these in
        // int64 and proves no overflow; with |theta|, |m| < 2**46, |delta| < 2**41 (checked
        // above), |m'| <= STATE_MAX (saturated), M < 2**16 and L < 2**29 every intermediate is
        // below 2**80, so the int256 results are the same integers. `sar` is the arithmetic
        // shift (floor) like Python's >>; `sat` clamps to [-hi, hi] with signed comparisons.
        //   m' = sat(((M * m) >> 16) + delta);  v = delta + ((M * m') >> 16)
        //   step = Lh * v + ((Ll * v) >> 16);  theta' = sat(theta - step)
        assembly ("memory-safe") {
            function sat(x, bound) -> y {
                y := x
                if sgt(x, bound) { y := bound }
                if slt(x, sub(0, bound)) { y := sub(0, bound) }
            }
            for { let i := 0 } lt(i, k) { i := add(i, 1) } {
                let slot := shl(5, add(i, 1))
                let de := mload(add(aggregate, slot))
                let mNew := sat(add(sar(16, mul(mq, mload(add(momentum, slot)))), de), hi)
                let v := add(de, sar(16, mul(mq, mNew)))
                let step := add(mul(lrHi, v), sar(16, mul(lrLo, v)))
                mstore(add(newMomentum, slot), mNew)
                mstore(add(newWeights, slot), sat(sub(mload(add(weights, slot)), step), hi))
            }
        }
    }

    // ------------------------------------------------------------------ internals

    /// @dev Bytes per value for `bits` (reverts unless 8 or 16).
    function _width(uint8 bits) private pure returns (uint256) {
        if (bits == 8) return 1;
        if (bits == 16) return 2;
        revert UnsupportedBits(bits);
    }

    /// @dev Signed big-endian value of `width` (1 or 2) bytes at memory address `ptr`.
    function _readValue(uint256 ptr, uint256 width) private pure returns (int256 q) {
        // assembly: one mload and a sign extension instead of per-byte bounds-checked indexing.
        // Reads at most 32 bytes from `ptr`, inside or just past a validated chunk (read only).
        assembly ("memory-safe") {
            let word := mload(ptr)
            switch width
            case 1 { q := signextend(0, shr(248, word)) }
            default { q := signextend(1, shr(240, word)) }
        }
    }

    /// @dev Whether the rule needs each coordinate's values sorted (TrimmedMean with t = 0 is Mean).
    function _needsSort(uint8 rule, uint256 trim) private pure returns (bool) {
        return rule == RULE_COORDINATE_MEDIAN || (rule == RULE_TRIMMED_MEAN && trim != 0);
    }

    /// @dev Insert `x` into the ascending `column[0 .. filled)`, making it `column[0 .. filled]`.
    function _insertSorted(int256[] memory column, uint256 filled, int256 x) private pure {
        // assembly: the insertion-sort inner loop (shift greater values up one slot) without
        // array bounds checks; callers guarantee filled < column.length.
        assembly ("memory-safe") {
            let base := add(column, 32)
            let k := filled
            for {} gt(k, 0) {} {
                let prev := mload(add(base, shl(5, sub(k, 1))))
                if iszero(sgt(prev, x)) { break }
                mstore(add(base, shl(5, k)), prev)
                k := sub(k, 1)
            }
            mstore(add(base, shl(5, k)), x)
        }
    }

    /// @dev The rule's value for one coordinate whose `n` values are sorted in `column`
    /// (or unsorted for Mean / TrimmedMean with t = 0).
    function _reduceSorted(int256[] memory column, uint256 n, uint8 rule, uint256 trim) private pure returns (int256) {
        if (rule == RULE_COORDINATE_MEDIAN) {
            if (n % 2 == 1) return column[n / 2];
            return (column[n / 2 - 1] + column[n / 2]) >> 1; // arithmetic shift: floor
        }
        int256 sum;
        // unchecked: at most 32 values below 2**50 in magnitude; indices stay below n.
        unchecked {
            for (uint256 i = trim; i < n - trim; ++i) {
                sum += column[i];
            }
        }
        return floorDiv(sum, int256(n - 2 * trim));
    }

    /// @dev Shared body of `mean`, `trimmedMean` and `coordinateMedian` on a row-major matrix.
    function _aggregateRows(int256[][] memory rows, uint8 rule, uint256 trim)
        private
        pure
        returns (int256[] memory out)
    {
        uint256 n = rows.length;
        if (n == 0 || n > MAX_INPUTS) revert BadInputCount(n);
        uint256 count = rows[0].length;
        for (uint256 i = 1; i < n; ++i) {
            if (rows[i].length != count) revert RaggedInputs(i, rows[i].length, count);
        }
        bool sorted = _needsSort(rule, trim);
        int256[] memory column = new int256[](n);
        out = new int256[](count);
        for (uint256 j = 0; j < count; ++j) {
            for (uint256 i = 0; i < n; ++i) {
                if (sorted) _insertSorted(column, i, rows[i][j]);
                else column[i] = rows[i][j];
            }
            out[j] = _reduceSorted(column, n, rule, trim);
        }
    }

    /// @dev Python's `coefficients` checks: `0 < lrPpm` (uint32 bounds the top), `momPpm < 10**6`.
    function _checkCoefficients(uint32 lrPpm, uint32 momPpm) private pure {
        if (lrPpm == 0) revert InvalidLearningRate(lrPpm);
        if (momPpm >= PPM) revert InvalidMomentum(momPpm);
    }

    /// @dev Revert with `StateOutOfBounds(what, i, xs[i])` at the first `|xs[i]| >= 2**boundBits`.
    function _requireBounded(int256[] memory xs, uint256 boundBits, uint8 what) private pure {
        uint256 i = _firstOutside(xs, (1 << boundBits) - 1, (1 << (boundBits + 1)) - 1);
        if (i < xs.length) revert StateOutOfBounds(what, i, xs[i]);
    }

    /// @dev Revert with `StateOutOfBounds(what, i, xs[i])` at the first value outside int64.
    function _requireInt64(int256[] memory xs, uint8 what) private pure {
        uint256 i = _firstOutside(xs, 1 << 63, 1 << 64);
        if (i < xs.length) revert StateOutOfBounds(what, i, xs[i]);
    }

    /// @dev First index with `uint256(xs[i] + offset) >= span` (wrapping), or `xs.length`:
    /// with `offset = 2**b - 1`, `span = 2**(b+1) - 1` that is the first `|x| >= 2**b`; with
    /// `offset = 2**63`, `span = 2**64` the first value outside int64.
    function _firstOutside(int256[] memory xs, uint256 offset, uint256 span) private pure returns (uint256 i) {
        // assembly: one add and compare per value instead of two signed comparisons with
        // bounds-checked indexing; reads only xs[0 .. length).
        assembly ("memory-safe") {
            let len := mload(xs)
            for {} lt(i, len) { i := add(i, 1) } {
                if iszero(lt(add(mload(add(xs, shl(5, add(i, 1)))), offset), span)) { break }
            }
        }
    }
}
