"""A shop's stock: quantities and unit prices by item name."""


class Inventory:
    def __init__(self):
        self._items = {}  # name -> [quantity, unit price]

    def add_item(self, name, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if price < 0:
            raise ValueError("price must not be negative")
        current = self._items.get(name, [0, price])[0]
        self._items[name] = [current + quantity, price]

    def remove_item(self, name, quantity):
        if name not in self._items:
            raise ValueError("unknown item: %s" % name)
        if quantity > self._items[name][0]:
            raise ValueError("not enough %s in stock" % name)
        self._items[name][0] -= quantity
        if self._items[name][0] == 0:
            del self._items[name]

    def quantity(self, name):
        return self._items.get(name, [0, 0])[0]

    def total_value(self):
        return sum(q * p for q, p in self._items.values())

    def low_stock(self, threshold):
        return sorted(n for n, (q, _) in self._items.items() if q <= threshold)
