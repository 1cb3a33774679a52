package policy

import (
	"fmt"

	"github.com/gymserver/gymserver/gym"
)

// Price is what a model costs, in USD per 1000 tokens. It feeds the cost
// estimates behind the per-episode cost cap and the high-usage warnings.
type Price struct {
	InputPer1K  float64
	OutputPer1K float64
}

// String describes p for log messages.
func (p Price) String() string {
	return fmt.Sprintf("$%g/$%g per 1k prompt/completion tokens", p.InputPer1K, p.OutputPer1K)
}

// seedPrices is the Real Work seed's price table, kept so that a seed
// user's max_cost_per_episode means what it meant there.
var seedPrices = map[string]Price{
	"gpt-4":                     {0.03, 0.06},
	"gpt-3.5-turbo":             {0.001, 0.002},
	"claude-3-sonnet":           {0.003, 0.015},
	"claude-3-opus":             {0.015, 0.075},
	"anthropic/claude-3-sonnet": {0.003, 0.015},
	"anthropic/claude-3-opus":   {0.015, 0.075},
	"anthropic/claude-4-sonnet": {0.003, 0.015},
	"anthropic/claude-sonnet-4": {0.003, 0.015},
}

// fallbackModel is the model whose price the seed used for models missing
// from its table: an overestimate for most, so a cost cap errs towards
// stopping early.
const fallbackModel = "gpt-4"

// PriceFor returns the seed's price of model, and whether the model is in
// its table; a model that is not gets GPT-4's price, as in the seed.
func PriceFor(model string) (Price, bool) {
	p, ok := seedPrices[model]
	if !ok {
		return seedPrices[fallbackModel], false
	}
	return p, true
}

// EffectivePrice returns c.Price when set, else PriceFor(c.Model).
func (c Config) EffectivePrice() Price {
	if c.Price != (Price{}) {
		return c.Price
	}
	p, _ := PriceFor(c.Model)
	return p
}

// Cost estimates what usage cost at c's price, in USD. Cached answers cost
// nothing.
func (c Config) Cost(u gym.Usage) float64 {
	p := c.EffectivePrice()
	return float64(u.PromptTokens)/1000*p.InputPer1K + float64(u.CompletionTokens)/1000*p.OutputPer1K
}
