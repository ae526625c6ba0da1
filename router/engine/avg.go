package engine

import (
	"math/big"

	"github.com/jackc/pgx/v5/pgtype"
)

// Postgres's numeric division (numeric.c): the quotient's scale is chosen
// by select_div_scale and the exact quotient is rounded to it, half away
// from zero (div_var with round). avg of int2, int4, int8 and numeric is
// numeric_div(sum, count) over the whole input, which is what divide
// computes from the shards' sums and counts.
const (
	numericMinSigDigits    = 16   // NUMERIC_MIN_SIG_DIGITS
	numericMaxDisplayScale = 1000 // NUMERIC_MAX_DISPLAY_SCALE
	decDigits              = 4    // DEC_DIGITS: numerics are base-10000 digits
)

// divideNumeric is numeric_div(x, n) for a finite x and n > 0.
func divideNumeric(x pgtype.Numeric, n int64) pgtype.Numeric {
	count := pgtype.Numeric{Int: big.NewInt(n), Valid: true}
	rscale := selectDivScale(x, count)
	// x = Int * 10^Exp; the quotient scaled by 10^rscale is
	// Int * 10^(Exp+rscale) / n.
	num := new(big.Int).Abs(x.Int)
	den := big.NewInt(n)
	if e := int64(x.Exp) + int64(rscale); e >= 0 {
		num.Mul(num, pow10(int32(e)))
	} else {
		den.Mul(den, pow10(int32(-e)))
	}
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Lsh(r, 1).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if x.Int.Sign() < 0 {
		q.Neg(q)
	}
	return pgtype.Numeric{Int: q, Exp: -rscale, Valid: true}
}

// selectDivScale is numeric.c's select_div_scale: at least 16 significant
// digits in the quotient, estimated from the first base-10000 digits and
// weights of both operands, and no less than either operand's display
// scale.
func selectDivScale(x, y pgtype.Numeric) int32 {
	w1, d1 := firstDigit(x)
	w2, d2 := firstDigit(y)
	qweight := w1 - w2
	if d1 <= d2 {
		qweight--
	}
	rscale := numericMinSigDigits - qweight*decDigits
	rscale = max(rscale, displayScale(x), displayScale(y), 0)
	return min(rscale, numericMaxDisplayScale)
}

// displayScale is a finite numeric's dscale: its digits after the point
// as written (pgtype keeps them: 1.50 is 150e-2).
func displayScale(x pgtype.Numeric) int32 { return max(-x.Exp, 0) }

// firstDigit returns the weight and value of the first non-zero
// base-10000 digit of |x| (digits aligned at the decimal point: weight w
// is the digit of 10000^w), or 0, 0 for zero.
func firstDigit(x pgtype.Numeric) (int32, int64) {
	if x.Int == nil || x.Int.Sign() == 0 {
		return 0, 0
	}
	abs := new(big.Int).Abs(x.Int)
	// The highest decimal digit is that of 10^p.
	p := int32(len(abs.String())) - 1 + x.Exp
	w := p / decDigits
	if p < 0 && p%decDigits != 0 {
		w-- // floor division
	}
	// The digit is floor(|x| / 10000^w) = floor(abs * 10^(Exp - 4w)).
	shift := x.Exp - decDigits*w
	if shift >= 0 {
		abs.Mul(abs, pow10(shift))
	} else {
		abs.Quo(abs, pow10(-shift))
	}
	return w, abs.Int64()
}
