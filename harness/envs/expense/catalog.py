"""Static reference data of the simulated D365 F&O expense module: subcategories and menu items."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Subcategory:
    code: str
    name: str
    category: str
    description: str


# The five folio expense types of the benchmark, in three categories, plus look-alikes that a careless agent
# could pick; the lookup shows all of them, as the product's lookup does.
SUBCATEGORIES: tuple[Subcategory, ...] = (
    Subcategory("LODG-ROOM", "Room rate", "Lodging", "Nightly room charge"),
    Subcategory("LODG-TAX", "Room tax", "Lodging", "Occupancy and city taxes on the room"),
    Subcategory("LODG-RESF", "Resort fee", "Lodging", "Mandatory resort or destination fee"),
    Subcategory("MEAL-REST", "Hotel restaurant", "Meals", "Meals charged to the room at the hotel restaurant"),
    Subcategory("MEAL-RMSV", "Room service", "Meals", "In-room dining"),
    Subcategory("MEAL-MINI", "Minibar", "Meals", "Minibar consumption"),
    Subcategory("INCD-PARK", "Parking", "Incidentals", "Hotel parking or valet"),
    Subcategory("INCD-LAUN", "Laundry", "Incidentals", "Laundry and dry cleaning"),
    Subcategory("INCD-PHON", "Telephone", "Incidentals", "Telephone calls from the room"),
    Subcategory("INCD-WIFI", "Internet", "Incidentals", "Internet access"),
)
BY_CODE = {s.code: s for s in SUBCATEGORIES}
BY_NAME = {s.name: s for s in SUBCATEGORIES}
FOLIO_TYPES = ("Room rate", "Room tax", "Hotel restaurant", "Parking", "Laundry")


@dataclass(frozen=True)
class MenuItem:
    name: str
    label: str
    path: str
    kind: str = "Display"


MENU_ITEMS: tuple[MenuItem, ...] = (
    MenuItem("TrvExpenses", "Expense reports", "Expense management > My expenses > Expense reports"),
    MenuItem("TrvExpensesAll", "All expense reports", "Expense management > Expenses > All expense reports"),
    MenuItem("TrvUnreconciledExpenses", "Unattached expenses", "Expense management > My expenses"),
    MenuItem("TrvExpenseWorkspace", "Expense management workspace", "Workspaces > Expense management"),
    MenuItem("TrvTravelRequisition", "Travel requisitions", "Expense management > My expenses > Travel"),
    MenuItem("TrvCashAdvance", "Cash advances", "Expense management > My expenses > Cash advances"),
    MenuItem("TrvParameters", "Expense management parameters", "Expense management > Setup"),
    MenuItem("TrvSubcategoryExpense", "Expense subcategories", "Expense management > Setup > Expense categories"),
    MenuItem("TrvCostType", "Expense categories", "Expense management > Setup > Expense categories"),
    MenuItem("TrvHotelItemizationRules", "Itemization rules", "Expense management > Setup > Policies"),
    MenuItem("TrvExpensePolicy", "Expense report policies", "Expense management > Setup > Policies"),
    MenuItem("TrvPerDiem", "Per diems", "Expense management > Setup > Per diems"),
    MenuItem("VendTable", "All vendors", "Accounts payable > Vendors > All vendors"),
    MenuItem("LedgerJournalTable", "General journals", "General ledger > Journal entries"),
)
MENU_BY_NAME = {m.name: m for m in MENU_ITEMS}
OPENABLE_FORMS = {"TrvExpenses"}
